package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// narrator prints the story on stdout: numbered steps, requests as "> "
// lines and answers as "< " lines, JSON bodies pretty-printed.
type narrator struct {
	w     io.Writer
	step  int
	blank bool // the last line written was empty
}

// line writes one line; an empty one only if the last was not empty already.
func (n *narrator) line(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if s == "" && n.blank {
		return
	}
	n.blank = s == ""
	fmt.Fprintln(n.w, s)
}

// Step starts a numbered section.
func (n *narrator) Step(title string) {
	n.step++
	n.line("")
	n.line("== %d. %s", n.step, title)
	n.line("")
}

// Say prints an indented line of commentary.
func (n *narrator) Say(format string, args ...any) {
	n.line("   "+format, args...)
}

// Block prints text (command output) indented, one line each.
func (n *narrator) Block(text string) {
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		n.line("%s", strings.TrimRight("     "+l, " "))
	}
}

// header is one request header, in the order it is printed.
type header struct{ name, value string }

// Request prints a request as it is sent.
func (n *narrator) Request(method, path string, headers []header, body []byte) {
	n.line("")
	n.line("> %s %s", method, path)
	for _, h := range headers {
		n.line("> %s: %s", h.name, h.value)
	}
	if len(body) > 0 {
		n.line(">")
		n.body("> ", body)
	}
	n.line("")
}

// shownHeaders are the answer headers worth seeing, in this order.
var shownHeaders = []string{"Content-Type", "Content-Length", "ETag", "Location", "Idempotent-Replayed", "Idempotency-Key-Expires", "Retry-After"}

// Response prints an answer: status line, the relevant headers, the body
// (its size alone unless it is JSON or text).
func (n *narrator) Response(r *response) {
	n.line("< %s %s", r.proto, r.status)
	for _, name := range shownHeaders {
		for _, v := range r.header.Values(name) {
			n.line("< %s: %s", name, v)
		}
	}
	if ct := r.header.Get("Content-Type"); len(r.body) > 0 {
		n.line("<")
		if strings.Contains(ct, "json") || strings.HasPrefix(ct, "text/") {
			n.body("< ", r.body)
		} else {
			n.line("< (%d bytes)", len(r.body))
		}
	}
	n.line("")
}

func (n *narrator) body(prefix string, body []byte) {
	text := string(body)
	var pretty bytes.Buffer
	if json.Indent(&pretty, bytes.TrimSpace(body), "", "  ") == nil {
		text = pretty.String()
	}
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		n.line("%s%s", prefix, l)
	}
}

// response is an answer read whole.
type response struct {
	proto  string // HTTP/1.1
	status string // 202 Accepted
	code   int
	header http.Header
	body   []byte
}

// String is the status line, for errors.
func (r *response) String() string {
	return fmt.Sprintf("%s %s", r.proto, r.status)
}

// raw returns a top-level member of a JSON body (nil if absent).
func (r *response) raw(name string) json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(r.body, &m)
	return m[name]
}

// field returns a top-level member of a JSON body as a string ("" if absent).
func (r *response) field(name string) string {
	raw := r.raw(name)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
