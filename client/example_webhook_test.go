package client_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/labelkit/labels/client"
)

// A receiver of completion webhooks: it verifies each delivery with the
// secret `api webhook set` printed, answers 2xx at once, and handles an
// event once although deliveries are at least once (a retry carries the
// same webhook-id).
func ExampleVerifyWebhook() {
	const secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZmdoaWprbG1ub3BxcnN0dXY=" // from api webhook set
	var mu sync.Mutex
	seen := map[string]bool{}

	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		ev, err := client.VerifyWebhook(secret, r.Header, body, time.Now())
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized) // not ours: never act on it
			return
		}
		mu.Lock()
		dup := seen[ev.ID]
		seen[ev.ID] = true
		mu.Unlock()
		if dup {
			w.WriteHeader(http.StatusNoContent) // delivered before
			return
		}
		fmt.Printf("%s: request %s is %s\n", ev.Type, ev.Data.ID, ev.Data.Status)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(receiver)
	defer srv.Close()

	// What the service sends: the same event twice (a retry), then a forgery.
	body := []byte(`{"type":"label_request.succeeded","timestamp":"2027-01-15T08:00:00Z","data":{"id":"lr_01JH","idempotency_key":"label:918273:1:v1","status":"succeeded","created_at":"2027-01-15T07:59:58Z","completed_at":"2027-01-15T08:00:00Z","label":{"label_id":"lbl_01JH"},"error":null}}`)
	for _, s := range []string{secret, secret, "whsec_Zm9yZ2VyeQ=="} {
		resp, err := http.DefaultClient.Do(delivery(srv.URL, s, "msg_lr_01JH", body))
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// label_request.succeeded: request lr_01JH is succeeded
	// 204
	// 204
	// 401
}

// delivery is a request signed as the service signs it.
func delivery(url, secret, id string, body []byte) *http.Request {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	key, _ := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + string(body)))
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	return req
}
