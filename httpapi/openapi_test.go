package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/api"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// TestOpenAPI sends the API requests that produce every status of every
// operation (and every problem code but a reserved one), and validates each
// real answer against api/openapi.yaml: the status is documented for the
// operation, the content type is listed, the body matches the schema, every
// required header is there, every header sent is documented and matches its
// schema. Then it checks the other direction: every documented status was
// seen, and every problem code of labels.go is in the document. So the
// document cannot drift from the implementation without this test failing.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)

	// The stack the story runs on: the carrier rejects one key and stays
	// unavailable for another, so both saved failures exist.
	s := stacktest.New(t, stacktest.Opts{MaxAttempts: 2})
	tok := s.Token("fulfilment")
	other := s.Token("other")
	rejectKey, unavailableKey := carrier.DeriveKey("fulfilment", "k-rejected"), carrier.DeriveKey("fulfilment", "k-unavailable")
	s.Carrier.Script = func(_ int, key string) string {
		switch key {
		case rejectKey:
			return "reject"
		case unavailableKey:
			return "unavailable"
		}
		return ""
	}
	check := func(method, path string, r stacktest.Response) stacktest.Response {
		t.Helper()
		doc.check(t, method, path, r)
		return r
	}
	post := func(token, key string, body []byte, headers ...string) stacktest.Response {
		t.Helper()
		return check(http.MethodPost, "/v1/labels", s.Create(token, key, body, headers...))
	}
	get := func(token, path string) stacktest.Response {
		t.Helper()
		return check(http.MethodGet, path, s.Do(http.MethodGet, path, token, nil))
	}
	idOf := func(r stacktest.Response) string {
		t.Helper()
		var v struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &v), string(r.Body))
		require.NotEmpty(t, v.ID)
		return v.ID
	}

	// The seed's story: 202, poll, 201 replayed, reuse, the natural key.
	body := stacktest.ParcelBody(918273, 1, 1450)
	doc.checkRequest(t, body, true)
	accepted := post(tok, "label:918273:1:v1", body)
	require.Equal(t, http.StatusAccepted, accepted.Status)
	id := idOf(accepted)
	get(tok, "/v1/label-requests/"+id)
	final := check(http.MethodGet, "/v1/label-requests/"+id, s.WaitFinal(tok, id))
	replay := post(tok, `"label:918273:1:v1"`, body)
	require.Equal(t, http.StatusCreated, replay.Status)
	require.Equal(t, http.StatusUnprocessableEntity, post(tok, "label:918273:1:v1", stacktest.ParcelBody(918273, 1, 1500)).Status)
	require.Equal(t, http.StatusConflict, post(tok, "another-key", stacktest.ParcelBody(918273, 1, 1500)).Status)
	waited := post(tok, "label:918273:2:v1", stacktest.ParcelBody(918273, 2, 900), "Prefer", "wait=10")
	require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, waited.Status)

	var lr struct {
		Label struct {
			LabelID string `json:"label_id"`
		} `json:"label"`
	}
	require.NoError(t, json.Unmarshal(final.Body, &lr))
	get(tok, "/v1/labels/"+lr.Label.LabelID)
	get(tok, "/v1/label-requests?idempotency_key=label:918273:1:v1")

	// The saved failures: while pending, then replayed.
	for _, key := range []string{"k-rejected", "k-unavailable"} {
		order := int64(7000 + len(key))
		first := post(tok, key, stacktest.ParcelBody(order, 1, 100))
		require.Equal(t, http.StatusAccepted, first.Status)
		check(http.MethodGet, "/v1/label-requests/"+idOf(first), s.WaitFinal(tok, idOf(first)))
		saved := post(tok, key, stacktest.ParcelBody(order, 1, 100))
		require.Equal(t, "true", saved.Header.Get("Idempotent-Replayed"))
	}

	// Refusals.
	require.Equal(t, http.StatusBadRequest, check(http.MethodPost, "/v1/labels", s.Do(http.MethodPost, "/v1/labels", tok, body)).Status)
	require.Equal(t, http.StatusBadRequest, post(tok, "has space", body).Status)
	for _, bad := range [][]byte{
		[]byte(`{"order_id":1,"colour":"red"}`),
		bytes.Replace(body, []byte(`"DE"`), []byte(`"de"`), 1),
		bytes.Replace(body, []byte(`"weight_g":1450`), []byte(`"weight_g":70001`), 1),
	} {
		doc.checkRequest(t, bad, false)
		require.Equal(t, http.StatusBadRequest, post(tok, "k-invalid", bad).Status)
	}
	require.Equal(t, http.StatusRequestEntityTooLarge, post(tok, "k-big", bytes.Repeat([]byte(" "), 64<<10+1)).Status)
	require.Equal(t, http.StatusUnsupportedMediaType, post(tok, "k-text", body, "Content-Type", "text/plain").Status)
	for _, token := range []string{"", "lk_unknown"} {
		require.Equal(t, http.StatusUnauthorized, post(token, "k", body).Status)
		for _, path := range []string{"/v1/label-requests/" + id, "/v1/label-requests?idempotency_key=k", "/v1/labels/" + lr.Label.LabelID} {
			require.Equal(t, http.StatusUnauthorized, get(token, path).Status)
		}
	}
	// Another caller's ids and keys do not exist for it.
	require.Equal(t, http.StatusNotFound, get(other, "/v1/label-requests/"+id).Status)
	require.Equal(t, http.StatusNotFound, get(other, "/v1/label-requests?idempotency_key=label:918273:1:v1").Status)
	require.Equal(t, http.StatusNotFound, get(other, "/v1/labels/"+lr.Label.LabelID).Status)
	require.Equal(t, http.StatusBadRequest, get(tok, "/v1/label-requests").Status)
	require.Equal(t, http.StatusNotFound, get(tok, "/v1/nothing-here").Status)
	require.Equal(t, http.StatusMethodNotAllowed, check(http.MethodDelete, "/v1/labels", s.Do(http.MethodDelete, "/v1/labels", tok, nil)).Status)
	require.Equal(t, http.StatusMethodNotAllowed, check(http.MethodPut, "/healthz", s.Do(http.MethodPut, "/healthz", "", nil)).Status)

	// A label's document, from an API whose carrier serves every label's
	// document with an ETag, and from one whose carrier is gone.
	var docLabel string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT label_id FROM labels WHERE document_url IS NOT NULL LIMIT 1`).Scan(&docLabel))
	docPath := "/v1/labels/" + docLabel + "/document"
	pdf := []byte("%PDF-1.4\n%%EOF\n")
	docCarrier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(pdf))
	}))
	t.Cleanup(docCarrier.Close)
	docs := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: s.Pool}, Carrier: carrier.NewClient(docCarrier.URL, nil)}))
	t.Cleanup(docs.Close)
	got := doc.fetch(t, docs.URL, http.MethodGet, docPath, tok, nil)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, pdf, got.Body)
	require.Equal(t, http.StatusNotModified, doc.fetch(t, docs.URL, http.MethodGet, docPath, tok, nil, "If-None-Match", `"v1"`).Status)
	require.Equal(t, http.StatusNotFound, doc.fetch(t, docs.URL, http.MethodGet, docPath, other, nil).Status)
	require.Equal(t, http.StatusUnauthorized, doc.fetch(t, docs.URL, http.MethodGet, docPath, "", nil).Status)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	noCarrier := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: s.Pool}, Carrier: carrier.NewClient(gone.URL, nil)}))
	t.Cleanup(noCarrier.Close)
	require.Equal(t, http.StatusBadGateway, doc.fetch(t, noCarrier.URL, http.MethodGet, docPath, tok, nil).Status)

	// The operational endpoints, from an API that serves the document.
	ops := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: s.Pool}, OpenAPI: api.OpenAPI}))
	t.Cleanup(ops.Close)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		r := doc.fetch(t, ops.URL, http.MethodGet, path, "", nil)
		require.Equal(t, http.StatusOK, r.Status, path)
		if path == "/openapi.yaml" {
			require.Equal(t, api.OpenAPI, r.Body)
		}
	}

	// 409 request_in_progress and 500: a claim held past ClaimWait, and a
	// failure inside the accept transaction.
	var hold, fail atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	busy := stacktest.New(t, stacktest.Opts{NoWorker: true, ClaimWait: 50 * time.Millisecond, AfterKeyInsert: func(ctx context.Context) error {
		if fail.Load() {
			return fmt.Errorf("injected failure")
		}
		if hold.CompareAndSwap(true, false) {
			close(held)
			<-release
		}
		return nil
	}})
	btok := busy.Token("fulfilment")
	hold.Store(true)
	var wg sync.WaitGroup
	wg.Go(func() { busy.Create(btok, "k-busy", body) })
	<-held
	inProgress := busy.Create(btok, "k-busy", body)
	close(release)
	wg.Wait()
	require.Equal(t, http.StatusConflict, check(http.MethodPost, "/v1/labels", inProgress).Status)
	fail.Store(true)
	require.Equal(t, http.StatusInternalServerError, check(http.MethodPost, "/v1/labels", busy.Create(btok, "k-fail", stacktest.ParcelBody(2, 1, 100))).Status)

	// 503 store_unavailable: an API whose database is gone.
	cfg := s.Pool.Config()
	closed, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	closed.Close()
	down := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: closed, Timeout: time.Second}}))
	t.Cleanup(down.Close)
	for _, path := range []string{"/v1/label-requests/" + id, "/v1/label-requests?idempotency_key=k", "/v1/labels/" + lr.Label.LabelID, docPath, "/readyz"} {
		require.Equal(t, http.StatusServiceUnavailable, doc.fetch(t, down.URL, http.MethodGet, path, tok, nil).Status, path)
	}
	require.Equal(t, http.StatusServiceUnavailable, doc.fetch(t, down.URL, http.MethodPost, "/v1/labels", tok, body, "Idempotency-Key", "k").Status)

	// 429 rate_limited: an API with a limit of one create a second per
	// caller, its clock stopped.
	stopped := time.Now()
	limited := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: s.Pool}, RateLimit: httpapi.RateLimit{PerSecond: 1, Now: func() time.Time { return stopped }}}))
	t.Cleanup(limited.Close)
	require.Equal(t, http.StatusAccepted, doc.fetch(t, limited.URL, http.MethodPost, "/v1/labels", tok, stacktest.ParcelBody(3, 1, 100), "Idempotency-Key", "k-limited-1").Status)
	require.Equal(t, http.StatusTooManyRequests, doc.fetch(t, limited.URL, http.MethodPost, "/v1/labels", tok, stacktest.ParcelBody(3, 2, 100), "Idempotency-Key", "k-limited-2").Status)

	doc.requireCovered(t, map[string]string{
		"GET /v1/label-requests/{id} 500":        "only on a database error that is not a connection error",
		"GET /v1/label-requests 500":             "only on a database error that is not a connection error",
		"GET /v1/labels/{label_id} 500":          "only on a database error that is not a connection error",
		"GET /v1/labels/{label_id}/document 500": "only on a database error that is not a connection error",
	})
	doc.requireCodes(t)
}

// openAPIDoc is the document, ready to check answers against.
type openAPIDoc struct {
	doc      map[string]any
	compiler *jsonschema.Compiler

	mu       sync.Mutex
	schemas  map[string]*jsonschema.Schema
	covered  map[string]bool
	codes    map[string]bool
	enumCode []string
}

const docURL = "https://labelkit.dev/openapi.json"

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	var y any
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &y))
	j, err := json.Marshal(y)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	require.NoError(t, c.AddResource(docURL, doc))
	d := &openAPIDoc{doc: doc.(map[string]any), compiler: c, schemas: map[string]*jsonschema.Schema{}, covered: map[string]bool{}, codes: map[string]bool{}}
	require.Equal(t, "3.1.0", d.doc["openapi"])
	for _, c := range d.at(t, "/components/schemas/ProblemCode/enum").([]any) {
		d.enumCode = append(d.enumCode, c.(string))
	}
	return d
}

// at returns the value at a JSON pointer.
func (d *openAPIDoc) at(t *testing.T, ptr string) any {
	t.Helper()
	var v any = d.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: %q is not in an object", ptr, tok)
		v, ok = m[tok]
		require.True(t, ok, "%s: no %q", ptr, tok)
	}
	return v
}

// resolve follows a $ref of a response or header object; it returns the
// object and its pointer.
func (d *openAPIDoc) resolve(t *testing.T, ptr string) (map[string]any, string) {
	t.Helper()
	obj := d.at(t, ptr).(map[string]any)
	for {
		ref, ok := obj["$ref"].(string)
		if !ok {
			return obj, ptr
		}
		ptr = strings.TrimPrefix(ref, "#")
		obj = d.at(t, ptr).(map[string]any)
	}
}

func escape(tok string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
}

func (d *openAPIDoc) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.schemas[ptr]; ok {
		return s
	}
	var frag strings.Builder
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		frag.WriteString("/" + url.PathEscape(tok))
	}
	s, err := d.compiler.Compile(docURL + "#" + frag.String())
	require.NoError(t, err, ptr)
	d.schemas[ptr] = s
	return s
}

// operation finds the documented operation of a request: its path template,
// or "" when no path matches.
func (d *openAPIDoc) template(path string) string {
	p, _, _ := strings.Cut(path, "?")
	paths := d.doc["paths"].(map[string]any)
	if _, ok := paths[p]; ok {
		return p
	}
	for tmpl := range paths {
		re := "^" + regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), `[^/]+`) + "$"
		if regexp.MustCompile(re).MatchString(p) {
			return tmpl
		}
	}
	return ""
}

// headersChecked are the headers the API sets itself: if one is sent, it
// must be documented on that answer.
var headersChecked = []string{"Location", "Retry-After", "Idempotent-Replayed", "Idempotency-Key-Expires", "Preference-Applied", "WWW-Authenticate", "Allow", "Accept-Post", "X-Request-Id"}

// check validates one real answer against the document.
func (d *openAPIDoc) check(t *testing.T, method, path string, r stacktest.Response) {
	t.Helper()
	status := strconv.Itoa(r.Status)
	tmpl := d.template(path)
	var respPtr, name string
	item, _ := d.doc["paths"].(map[string]any)[tmpl].(map[string]any)
	switch op, ok := item[strings.ToLower(method)]; {
	case tmpl == "":
		require.Equal(t, http.StatusNotFound, r.Status, "%s %s: no such path in the document", method, path)
		respPtr, name = "/components/responses/NotFound", "NotFound"
	case !ok || op == nil:
		require.Equal(t, http.StatusMethodNotAllowed, r.Status, "%s %s: no such operation in the document", method, path)
		respPtr, name = "/components/responses/MethodNotAllowed", "MethodNotAllowed"
	default:
		responses := op.(map[string]any)["responses"].(map[string]any)
		_, documented := responses[status]
		require.True(t, documented, "%s %s answered %d, which the document does not list for %s %s: %s", method, path, r.Status, method, tmpl, r.Body)
		respPtr = "/paths/" + escape(tmpl) + "/" + strings.ToLower(method) + "/responses/" + status
		name = method + " " + tmpl + " " + status
	}
	resp, respPtr := d.resolve(t, respPtr)
	d.mu.Lock()
	d.covered[name] = true
	d.mu.Unlock()

	// Body: the content type is listed and the body matches its schema; a
	// 304 has none.
	if r.Status == http.StatusNotModified {
		require.Empty(t, r.Body, "%s: a 304 with a body", name)
		_, has := resp["content"]
		require.False(t, has, "%s: a 304 documented with content", name)
	} else {
		d.checkBody(t, name, respPtr, resp, r)
	}

	// Headers: the required ones are sent, the ones sent are documented, and
	// every one matches its schema.
	d.checkHeaders(t, name, respPtr, resp, r)
}

// checkBody checks that an answer's content type is listed for it and its
// body matches the schema.
func (d *openAPIDoc) checkBody(t *testing.T, name, respPtr string, resp map[string]any, r stacktest.Response) {
	t.Helper()
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	require.NoError(t, err, "%s: Content-Type %q", name, r.Header.Get("Content-Type"))
	content, _ := resp["content"].(map[string]any)
	_, listed := content[mt]
	require.True(t, listed, "%s: content type %s is not documented", name, mt)
	if mt == "application/json" || mt == "application/problem+json" {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.Body))
		require.NoError(t, err, "%s: %s", name, r.Body)
		err = d.schema(t, respPtr+"/content/"+escape(mt)+"/schema").Validate(v)
		require.NoError(t, err, "%s: the body does not match the document: %s", name, r.Body)
		if mt == "application/problem+json" {
			d.mu.Lock()
			d.codes[v.(map[string]any)["code"].(string)] = true
			d.mu.Unlock()
		}
	}
}

// checkHeaders checks that an answer sends the required headers of its
// documented response, and only documented ones, each matching its schema.
func (d *openAPIDoc) checkHeaders(t *testing.T, name, respPtr string, resp map[string]any, r stacktest.Response) {
	t.Helper()
	headers, _ := resp["headers"].(map[string]any)
	for h := range headers {
		hobj, hptr := d.resolve(t, respPtr+"/headers/"+escape(h))
		v := r.Header.Get(h)
		if v == "" {
			require.NotEqual(t, true, hobj["required"], "%s: the required header %s is missing", name, h)
			continue
		}
		var val any = v
		if hobj["schema"].(map[string]any)["type"] == "integer" {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, "%s: %s: %q is not an integer", name, h, v)
			val = json.Number(strconv.Itoa(n))
		}
		require.NoError(t, d.schema(t, hptr+"/schema").Validate(val), "%s: header %s: %q", name, h, v)
	}
	for _, h := range headersChecked {
		if r.Header.Get(h) == "" {
			continue
		}
		_, documented := headers[h]
		require.True(t, documented, "%s: sends %s: %q, which the document does not list", name, h, r.Header.Get(h))
	}
}

// fetch sends a request to base and checks the answer.
func (d *openAPIDoc) fetch(t *testing.T, base, method, path, token string, body []byte, headers ...string) stacktest.Response {
	t.Helper()
	api := &stacktest.Stack{T: t, URL: base}
	r := api.Do(method, path, token, body, headers...)
	d.check(t, method, path, r)
	return r
}

// checkRequest validates a request body against the documented one.
func (d *openAPIDoc) checkRequest(t *testing.T, body []byte, valid bool) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	err = d.schema(t, "/paths/~1v1~1labels/post/requestBody/content/application~1json/schema").Validate(v)
	if valid {
		require.NoError(t, err, "%s", body)
	} else {
		require.Error(t, err, "the document accepts a body the API refuses: %s", body)
	}
}

// requireCovered checks that every documented status of every operation, and
// every problem code, was seen in a real answer, but for the reasons given.
func (d *openAPIDoc) requireCovered(t *testing.T, notSeen map[string]string) {
	t.Helper()
	var missing []string
	want := []string{"NotFound", "MethodNotAllowed"}
	for tmpl, item := range d.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			for status := range op.(map[string]any)["responses"].(map[string]any) {
				want = append(want, strings.ToUpper(method)+" "+tmpl+" "+status)
			}
		}
	}
	for _, code := range d.enumCode {
		want = append(want, "code "+code)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for code := range d.codes {
		d.covered["code "+code] = true
	}
	for _, w := range want {
		if !d.covered[w] && notSeen[w] == "" {
			missing = append(missing, w)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "documented but never seen in a real answer")
	for w := range notSeen {
		require.True(t, slices.Contains(want, w), "%q is excused but not documented", w)
		require.False(t, d.covered[w], "%q is excused but was seen: drop the excuse", w)
	}
}

// requireCodes checks that the document's ProblemCode lists exactly the
// codes of labels.go.
func (d *openAPIDoc) requireCodes(t *testing.T) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../labels.go", nil, 0)
	require.NoError(t, err)
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Code") {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, _ := strconv.Unquote(lit.Value)
			codes = append(codes, s)
		}
		return true
	})
	require.NotEmpty(t, codes)
	require.ElementsMatch(t, codes, d.enumCode, "labels.go's codes and the document's ProblemCode")
}
