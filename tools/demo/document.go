package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// document fetches the label's printable document through the API, with
// the caller's token alone (the API fetches it from the carrier), then again
// with its ETag: 304, no bytes.
func (d *demo) document(ctx context.Context) error {
	d.say.Step("Print the label: its document through the API, with the caller's token (the API fetches it from the carrier)")
	var label struct {
		TrackingNo string `json:"tracking_no"`
		Document   *struct {
			ContentType string `json:"content_type"`
			SizeBytes   int64  `json:"size_bytes"`
		} `json:"document"`
	}
	if err := json.Unmarshal(d.label, &label); err != nil || label.Document == nil {
		return fmt.Errorf("the label names no document: %s", d.label)
	}
	path := "/v1/labels/" + d.labelID + "/document"
	d.say.Request(http.MethodGet, path, d.auth(), nil)
	r, err := d.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	d.documentAnswer(r)
	if err := expect(r, http.StatusOK, ""); err != nil {
		return err
	}
	etag := r.header.Get("ETag")
	switch {
	case r.header.Get("Content-Type") != label.Document.ContentType:
		return fmt.Errorf("Content-Type %q, want the label's %q", r.header.Get("Content-Type"), label.Document.ContentType)
	case int64(len(r.body)) != label.Document.SizeBytes:
		return fmt.Errorf("%d bytes, want the label's %d", len(r.body), label.Document.SizeBytes)
	case !bytes.HasPrefix(r.body, []byte("%PDF-")) || !bytes.Contains(r.body, []byte(label.TrackingNo)):
		return fmt.Errorf("the document is not the label's PDF: %.60q", r.body)
	case etag == "":
		return fmt.Errorf("no ETag")
	}
	d.say.Say("%d bytes of PDF that print tracking number %s.", len(r.body), label.TrackingNo)

	headers := []header{{"If-None-Match", etag}}
	d.say.Request(http.MethodGet, path, append(d.auth(), headers...), nil)
	r, err = d.do(ctx, http.MethodGet, path, headers, nil)
	if err != nil {
		return err
	}
	d.documentAnswer(r)
	if err := expect(r, http.StatusNotModified, ""); err != nil {
		return err
	}
	d.say.Say("Unchanged since that ETag: 304, nothing sent again.")
	return nil
}

// documentAnswer prints a document's answer: its status line and headers,
// and the size of its body rather than the bytes.
func (d *demo) documentAnswer(r *response) {
	d.say.line("< %s %s", r.proto, r.status)
	for _, name := range []string{"Content-Type", "Content-Length", "ETag"} {
		if v := r.header.Get(name); v != "" {
			d.say.line("< %s: %s", name, v)
		}
	}
	if len(r.body) > 0 {
		d.say.line("<")
		d.say.line("< (%s bytes)", strconv.Itoa(len(r.body)))
	}
	d.say.line("")
}
