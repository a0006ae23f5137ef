package capacity

// Phase 2: whole requests. WAL and commits per accepted request and per
// completed label.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pipeline sends Pipeline requests through the API, then lets the worker
// turn them into labels, and measures the WAL and the commits of each side.
func (e *env) pipeline(ctx context.Context) (Pipeline, error) {
	p := Pipeline{Requests: e.cfg.Pipeline}
	m0, err := e.walMark(ctx)
	if err != nil {
		return p, err
	}
	probe := e.probe(ctx)
	start := time.Now()
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range e.cfg.Clients {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(e.cfg.Pipeline) || ctx.Err() != nil {
					return
				}
				order := pipelineOrderBase + i
				parcel := parcelFor(order, 1, splitmix(uint64(order)))
				body, _ := json.Marshal(parcel)
				status, err := e.post(ctx, "fulfilment", fmt.Sprintf("label:%d:1:v1", order), body)
				if err == nil && status != http.StatusAccepted {
					err = fmt.Errorf("accept answered %d", status)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return p, firstErr
	}
	p.AcceptSeconds = time.Since(start).Seconds()
	p.AcceptsPerSec = float64(p.Requests) / p.AcceptSeconds
	p.AcceptHost = probe.end(ctx)
	if p.AcceptWAL, err = e.walSince(ctx, m0, 256<<20); err != nil {
		return p, err
	}
	p.WALPerAccept = float64(p.AcceptWAL.Bytes) / float64(p.Requests)
	p.WALPerAcceptNoFPI = float64(p.AcceptWAL.Bytes-p.AcceptWAL.FPIBytes) / float64(p.Requests)
	p.CommitsPerAccept = float64(p.AcceptWAL.Commits) / float64(p.Requests)

	m1, err := e.walMark(ctx)
	if err != nil {
		return p, err
	}
	// The worker side: the relay and River with the buy-label worker,
	// against a carrier that always answers.
	probe = e.probe(ctx)
	start = time.Now()
	stopWorker, err := startWorker(ctx, e.url, &fakeCarrier{})
	if err != nil {
		return p, err
	}
	defer stopWorker()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var pending int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM label_intents WHERE order_id >= $1 AND order_id < $2 AND status = 'pending'`,
			pipelineOrderBase, pipelineOrderBase+p.Requests).Scan(&pending); err != nil {
			return p, err
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return p, fmt.Errorf("%d intents still pending after 5 minutes", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.WorkSeconds = time.Since(start).Seconds()
	p.LabelsPerSec = float64(p.Requests) / p.WorkSeconds
	p.WorkHost = probe.end(ctx)
	stopWorker()
	if p.WorkWAL, err = e.walSince(ctx, m1, 256<<20); err != nil {
		return p, err
	}
	p.WALPerLabel = float64(p.WorkWAL.Bytes) / float64(p.Requests)
	p.WALPerLabelNoFPI = float64(p.WorkWAL.Bytes-p.WorkWAL.FPIBytes) / float64(p.Requests)
	p.CommitsPerLabel = float64(p.WorkWAL.Commits) / float64(p.Requests)
	err = e.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM label_intents WHERE order_id >= $1 AND order_id < $2 AND status = 'succeeded'),
		(SELECT count(*) FROM river_job WHERE kind = 'buy_label' AND state = 'completed')`,
		pipelineOrderBase, pipelineOrderBase+p.Requests).Scan(&p.Succeeded, &p.RiverJobs)
	return p, err
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// post sends one POST /v1/labels and returns the status.
func (e *env) post(ctx context.Context, callerID, key string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.api.URL+"/v1/labels", strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.tokens[callerID])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
