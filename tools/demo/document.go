package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
)

// document fetches the label's printable document through the API, with
// the caller's token alone (the API fetches it from the carrier), then again
// with its ETag: 304, no bytes.
func (d *demo) document(ctx context.Context) error {
	d.say.Step("Print the label: its document through the API, with the caller's token (the API fetches it from the carrier)")
	doc := d.label.Document
	if doc == nil {
		return fmt.Errorf("the label names no document: %s", d.labelJSON)
	}
	path := "/v1/labels/" + d.label.LabelID + "/document"
	r, err := d.get(ctx, path, nil, http.StatusOK)
	if err != nil {
		return err
	}
	etag := r.header.Get("ETag")
	switch {
	case r.header.Get("Content-Type") != doc.ContentType:
		return fmt.Errorf("Content-Type %q, want the label's %q", r.header.Get("Content-Type"), doc.ContentType)
	case int64(len(r.body)) != doc.SizeBytes:
		return fmt.Errorf("%d bytes, want the label's %d", len(r.body), doc.SizeBytes)
	case !bytes.HasPrefix(r.body, []byte("%PDF-")) || !bytes.Contains(r.body, []byte(d.label.TrackingNo)):
		return fmt.Errorf("the document is not the label's PDF: %.60q", r.body)
	case etag == "":
		return fmt.Errorf("no ETag")
	}
	d.say.Say("%d bytes of PDF that print tracking number %s.", len(r.body), d.label.TrackingNo)

	if _, err := d.get(ctx, path, []header{{"If-None-Match", etag}}, http.StatusNotModified); err != nil {
		return err
	}
	d.say.Say("Unchanged since that ETag: 304, nothing sent again.")
	return nil
}

// get sends a GET to the API with headers, shows it and its answer, and
// checks the answer's status code.
func (d *demo) get(ctx context.Context, path string, headers []header, code int) (*response, error) {
	d.say.Request(http.MethodGet, path, append(d.auth(), headers...), nil)
	r, err := d.do(ctx, http.MethodGet, path, headers, nil)
	if err != nil {
		return nil, err
	}
	d.say.Response(r)
	return r, expect(r, code, "")
}
