package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// healthPoll is the pause between two GET /healthz.
const healthPoll = 50 * time.Millisecond

// WaitHealthy polls GET baseURL/healthz until it answers 200, and fails when
// ctx ends first. baseURL is "http://host:port" or a bare "host:port".
func WaitHealthy(ctx context.Context, baseURL string) error {
	return waitHealthy(ctx, baseURL, nil)
}

// WaitHealthy is [WaitHealthy] for the process's own server: it also fails as
// soon as the process exits.
func (p *Process) WaitHealthy(ctx context.Context, baseURL string) error {
	err := waitHealthy(ctx, baseURL, p.done)
	if err != nil {
		return fmt.Errorf("%s: %w; last output:\n%s", p.name, err, p.Tail(TailLines))
	}
	return nil
}

func waitHealthy(ctx context.Context, baseURL string, exited <-chan struct{}) error {
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	u := strings.TrimRight(baseURL, "/") + "/healthz"
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		last = err
		select {
		case <-exited:
			return fmt.Errorf("exited before GET %s answered 200 (last: %v)", u, last)
		case <-ctx.Done():
			return fmt.Errorf("GET %s did not answer 200: %w", u, errors.Join(context.Cause(ctx), last))
		case <-time.After(healthPoll):
		}
	}
}
