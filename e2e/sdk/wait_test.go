package sdk_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// exchange is one request the client made and the answer's headers.
type exchange struct {
	method, path, prefer string
	status               int
	header               http.Header
	sent, answered       time.Time
}

type recordingTransport struct {
	mu  sync.Mutex
	log []exchange
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	e := exchange{method: r.Method, path: r.URL.Path, prefer: r.Header.Get("Prefer"), sent: time.Now()}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		e.status, e.header, e.answered = resp.StatusCode, resp.Header, time.Now()
	}
	rt.mu.Lock()
	rt.log = append(rt.log, e)
	rt.mu.Unlock()
	return resp, err
}

// An API that holds no more waiting requests answers the client's Prefer:
// wait at once, 202 with Retry-After the wait asked and no
// Preference-Applied: the client polls the label request, no sooner than
// that Retry-After, and returns the label once it is bought.
func TestCreateLabelWhenTheAPIHoldsNoMoreWaits(t *testing.T) {
	t.Parallel()
	stack := stacktest.New(t, stacktest.Opts{})
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: stack.Pool}, Log: zerolog.Nop(), MaxWaiters: -1}))
	t.Cleanup(srv.Close)
	rt := &recordingTransport{}
	c := client.New(srv.URL, stack.Token("fulfilment"), client.WithHTTPClient(&http.Client{Transport: rt}),
		client.WithWait(2*time.Second), client.WithPollInterval(20*time.Millisecond), client.WithMaxWait(time.Minute))

	p := parcel(918273, 1)
	l, err := c.CreateLabel(ctx(t), p)
	require.NoError(t, err)
	require.Equal(t, p.OrderID, l.OrderID)

	rt.mu.Lock()
	defer rt.mu.Unlock()
	require.GreaterOrEqual(t, len(rt.log), 2)
	first := rt.log[0]
	require.Equal(t, http.MethodPost, first.method)
	require.Equal(t, "wait=2", first.prefer)
	require.Equal(t, http.StatusAccepted, first.status)
	require.Empty(t, first.header.Get("Preference-Applied"))
	require.Equal(t, "2", first.header.Get("Retry-After"))
	for _, e := range rt.log[1:] {
		require.Equal(t, http.MethodGet, e.method, "the client polls; it does not post again")
		require.Regexp(t, `^/v1/label-requests/lr_`, e.path)
	}
	require.GreaterOrEqual(t, rt.log[1].sent.Sub(first.answered), 2*time.Second, "the first poll waits for Retry-After")
	require.Equal(t, http.StatusOK, rt.log[len(rt.log)-1].status)
}
