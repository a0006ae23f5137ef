module github.com/labelkit/labels/client

go 1.22
