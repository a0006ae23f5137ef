package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/labelkit/labels/client"
)

// receiver is the demo's webhook endpoint: a plain-HTTP server on loopback in
// the demo's own process (hence WEBHOOK_ALLOW_INSECURE and
// WEBHOOK_ALLOW_PRIVATE for the api and the worker, and
// WEBHOOK_ALLOW_UNSEALED: a development setup without WEBHOOK_SECRET_KEY),
// passing on what it gets.
type receiver struct {
	srv *httptest.Server
	got chan delivery
}

// delivery is one webhook request as the receiver got it.
type delivery struct {
	header http.Header
	body   []byte
}

func newReceiver() *receiver {
	rc := &receiver{got: make(chan delivery, 64)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		select {
		case rc.got <- delivery{r.Header.Clone(), body}:
		default: // more than the demo looks at
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	return rc
}

// find waits up to timeout for a delivery of webhook-id id.
func (rc *receiver) find(ctx context.Context, id string, timeout time.Duration) (delivery, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		select {
		case d := <-rc.got:
			if d.header.Get("webhook-id") == id {
				return d, true
			}
		case <-ctx.Done():
			return delivery{}, false
		}
	}
}

// webhookEnv lets the api and the worker use the demo's loopback receiver,
// with the signing secret stored raw (a development setup).
var webhookEnv = map[string]string{"WEBHOOK_ALLOW_INSECURE": "true", "WEBHOOK_ALLOW_PRIVATE": "true", "WEBHOOK_ALLOW_UNSEALED": "true"}

// setWebhook registers the demo's receiver for the caller.
func (d *demo) setWebhook(ctx context.Context) error {
	d.hooks = newReceiver()
	url := d.hooks.srv.URL + "/labelkit-webhooks"
	d.say.Step("Webhook: tell the caller when its label request is final")
	d.say.Say("$ WEBHOOK_ALLOW_INSECURE=true WEBHOOK_ALLOW_PRIVATE=true WEBHOOK_ALLOW_UNSEALED=true api webhook set %s %s", callerName, url)
	d.say.Say("  (a receiver on loopback in this demo; by default only public https:// endpoints are allowed)")
	res, err := d.command(ctx, "api", "webhook", "set", callerName, url)
	if err != nil {
		return err
	}
	d.secret = res.LastLine()
	if !strings.HasPrefix(d.secret, "whsec_") {
		return fmt.Errorf("api webhook set printed no secret:\n%s", res.Stdout)
	}
	d.say.Block(strings.Replace(res.Stdout, d.secret, mask(d.secret), 1))
	return nil
}

// webhook waits for the delivery of the succeeded request's event and
// verifies its signature with the printed secret.
func (d *demo) webhook(ctx context.Context) error {
	d.say.Step("The webhook: the worker told the receiver, signed (Standard Webhooks)")
	id := "msg_" + d.requestID
	dl, ok := d.hooks.find(ctx, id, pollTimeout)
	if !ok {
		return fmt.Errorf("no webhook delivery with webhook-id %s within %s", id, pollTimeout)
	}
	d.say.Say("> POST %s", d.hooks.srv.URL+"/labelkit-webhooks")
	for _, name := range []string{"Content-Type", "webhook-id", "webhook-timestamp", "webhook-signature"} {
		d.say.Say("> %s: %s", name, dl.header.Get(name))
	}
	d.say.Say(">")
	d.say.Block(string(dl.body))
	ev, err := client.VerifyWebhook(d.secret, dl.header, dl.body, time.Now())
	if err != nil {
		return fmt.Errorf("the delivery does not verify with the printed secret: %w", err)
	}
	if ev.Type != client.EventSucceeded || ev.Data.ID != d.requestID || ev.Data.Status != "succeeded" {
		return fmt.Errorf("the event is %s for %s (%s), want label_request.succeeded for %s", ev.Type, ev.Data.ID, ev.Data.Status, d.requestID)
	}
	d.say.Say("client.VerifyWebhook(secret, header, body, now): OK, HMAC-SHA256 over id.timestamp.body matches, timestamp within 5 minutes")
	d.say.Say("event %s: %s, request %s", ev.ID, ev.Type, ev.Data.ID)
	return nil
}
