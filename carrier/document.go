package carrier

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// DocumentAnswer is the carrier's answer to GET
// /v1/labels/{carrier_label_id}/document (carrier.md): 200 with the label
// document, or 304 when IfNoneMatch named its current ETag.
type DocumentAnswer struct {
	// Status is 200 or 304.
	Status int
	// ContentType, ContentLength (-1 when the carrier sent none) and ETag
	// (empty when it sent none) are the answer's headers.
	ContentType   string
	ContentLength int64
	ETag          string
	// Body is the document (empty for a 304 or a HEAD); the caller closes it.
	Body io.ReadCloser
}

// Document asks the carrier for a label's printable document with method
// (GET, or HEAD for its headers only), sending ifNoneMatch as If-None-Match
// when it is not empty. The caller closes the answer's Body, and bounds
// the transfer with ctx. A 404 (the carrier knows no such label) is a
// [*RejectedError] with Op "document"; any other answer but 200 or 304, or
// none, is an [*UnknownOutcomeError] (with the carrier's Retry-After).
func (c *Client) Document(ctx context.Context, carrierLabelID, method, ifNoneMatch string) (*DocumentAnswer, error) {
	if method != http.MethodGet && method != http.MethodHead {
		return nil, fmt.Errorf("carrier: document: method %s, want GET or HEAD", method)
	}
	u := c.baseURL + "/v1/labels/" + url.PathEscape(carrierLabelID) + "/document"
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("carrier: build request: %w", err)
	}
	c.setHeaders(req)
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", ifNoneMatch)
	}
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return nil, &UnknownOutcomeError{Err: unwrapURLError(err)}
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNotModified:
		return &DocumentAnswer{
			Status:        resp.StatusCode,
			ContentType:   resp.Header.Get("Content-Type"),
			ContentLength: resp.ContentLength,
			ETag:          resp.Header.Get("ETag"),
			Body:          resp.Body,
		}, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusNotFound {
		code, msg := problem(resp.StatusCode, body)
		return nil, &RejectedError{Status: resp.StatusCode, Code: code, Message: msg, Op: "document"}
	}
	return nil, &UnknownOutcomeError{
		Status:     resp.StatusCode,
		Err:        fmt.Errorf("document: carrier answered %d %s: %s", resp.StatusCode, http.StatusText(resp.StatusCode), snippet(body)),
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}
