package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// rawResponse sends bytes as they are and reads one response.
func rawResponse(t *testing.T, addr string, req string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
	// Write while reading: the server may answer (413, say) and close before
	// it has read a large request, and the rest of the write then fails.
	go func() { _, _ = io.WriteString(conn, req) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answers, it does not hang up silently")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func post(path, token string, headers []string, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nConnection: close\r\n", path, token)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

func get(path, token string) string {
	return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", path, token)
}

// Hostile input: every request gets a 4xx, never a 5xx and never a hang; the
// server stays healthy and stores nothing. The complete requests go to a
// server with the default read limits, far longer than any request takes to
// arrive on a busy machine; the trickling ones to a server with short limits,
// which they never meet however long the machine takes.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	serve := func(l httpapi.Limits) string {
		srv := httpapi.NewHTTPServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: s.Pool}, Log: zerolog.Nop()}), l)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	addr := serve(httpapi.Limits{})
	short := serve(httpapi.Limits{ReadHeaderTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second})

	valid := string(stacktest.ParcelBody(1, 1, 100))
	key := "Idempotency-Key: hostile"
	many := make([]string, 200)
	for i := range many {
		many[i] = fmt.Sprintf("Idempotency-Key: k%d", i)
	}
	cases := map[string]string{
		"invalid utf-8":       post("/v1/labels", tok, []string{key}, strings.Replace(valid, "Exampleton", "Ex\xff\xfeton", 1)),
		"10000-deep nesting":  post("/v1/labels", tok, []string{key}, strings.Repeat("[", 10000)+strings.Repeat("]", 10000)),
		"deep object":         post("/v1/labels", tok, []string{key}, strings.Repeat(`{"a":`, 10000)+"1"+strings.Repeat("}", 10000)),
		"1e400":               post("/v1/labels", tok, []string{key}, strings.Replace(valid, `"order_id":1`, `"order_id":1e400`, 1)),
		"2^63":                post("/v1/labels", tok, []string{key}, strings.Replace(valid, `"order_id":1`, `"order_id":9223372036854775808`, 1)),
		"-2^63":               post("/v1/labels", tok, []string{key}, strings.Replace(valid, `"order_id":1`, `"order_id":-9223372036854775808`, 1)),
		"NUL in a string":     post("/v1/labels", tok, []string{key}, strings.Replace(valid, "Exampleton", `Ex\u0000ton`, 1)),
		"raw NUL":             post("/v1/labels", tok, []string{key}, valid+"\x00"),
		"1 MiB body":          post("/v1/labels", tok, []string{key}, `{"pad":"`+strings.Repeat("x", 1<<20)+`"}`),
		"200 key headers":     post("/v1/labels", tok, many, valid),
		"CRLF in key":         post("/v1/labels", tok, []string{"Idempotency-Key: a\r\nb"}, valid),
		"bare CR in key":      post("/v1/labels", tok, []string{"Idempotency-Key: a\rb"}, valid),
		"unicode key":         post("/v1/labels", tok, []string{"Idempotency-Key: ключ:918273"}, valid),
		"path traversal":      get("/v1/labels/../../etc/passwd", tok),
		"encoded traversal":   get("/v1/label-requests/..%2f..%2fetc%2fpasswd", tok),
		"double slash":        get("//v1/labels/x", tok),
		"sql in id":           get("/v1/labels/x'%20OR%20'1'='1", tok),
		"sql in key query":    get("/v1/label-requests?idempotency_key=x';DROP%20TABLE%20labels;--", tok),
		"sql in key no space": get("/v1/label-requests?idempotency_key=x';DROP/**/TABLE/**/labels;--", tok),
		"sql in token":        post("/v1/labels", "x' OR '1'='1", []string{key}, valid),
		"json not object":     post("/v1/labels", tok, []string{key}, `"just a string"`),
		"huge number string":  post("/v1/labels", tok, []string{key}, strings.Replace(valid, `"order_id":1`, `"order_id":`+strings.Repeat("9", 5000), 1)),
	}
	for name, req := range cases {
		resp, body := rawResponse(t, addr, req)
		require.True(t, resp.StatusCode >= 400 && resp.StatusCode < 500, "%s: %d %s", name, resp.StatusCode, body)
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			require.Contains(t, string(body), `"code"`, name)
		}
	}

	// A client that trickles its headers, or promises a body it never sends, is cut off.
	for name, partial := range map[string]string{
		"slow headers": "POST /v1/labels HTTP/1.1\r\nHost: x\r\n",
		"slow body":    "POST /v1/labels HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\nIdempotency-Key: slow\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"order_id\":",
	} {
		conn, err := net.Dial("tcp", short)
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
		_, err = io.WriteString(conn, partial)
		require.NoError(t, err)
		rest, err := io.ReadAll(conn) // returns when the server closes the connection
		require.NoError(t, err, name)
		if len(rest) > 0 {
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(rest))), nil)
			require.NoError(t, err)
			require.Less(t, resp.StatusCode, 500, name)
		}
		conn.Close()
	}

	resp, _ := rawResponse(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = rawResponse(t, addr, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var keys, intents int
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM idempotency_keys), (SELECT count(*) FROM label_intents)`).Scan(&keys, &intents))
	require.Zero(t, keys)
	require.Zero(t, intents)
	tables := s.Count(`SELECT count(*) FROM pg_tables WHERE tablename = 'labels'`)
	require.Equal(t, 1, tables)
}
