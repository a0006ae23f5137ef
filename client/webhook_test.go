package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// sign is the docs' formula, written out independently of every package of
// the project: v1,base64(HMAC-SHA256(base64-decoded secret, id.timestamp.body)).
func sign(t *testing.T, secret, id string, ts int64, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	require.NoError(t, err)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "." + string(body)))
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	// Standard Webhooks' own test vector (its reference libraries' tests).
	const refSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const refID, refTS = "msg_p5jXN8AQM9LWM0D4loKWxJek", int64(1614265330)
	refBody := []byte(`{"test": 2432232314}`)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", sign(t, refSecret, refID, refTS, refBody))

	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdefghijklmnopqrstuv"))
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of 32 bytes......"))
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"label_request.succeeded","timestamp":"2027-01-15T08:00:00Z","data":{"id":"lr_1","idempotency_key":"k","status":"succeeded","created_at":"2027-01-15T07:59:59Z","completed_at":"2027-01-15T08:00:00Z","label":{"label_id":"lbl_1"},"error":null}}`)
	headers := func(ts int64, sigs string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", "msg_lr_1")
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", sigs)
		return h
	}

	ev, err := VerifyWebhook(secret, headers(now.Unix(), sign(t, secret, "msg_lr_1", now.Unix(), body)), body, now)
	require.NoError(t, err)
	require.Equal(t, "msg_lr_1", ev.ID)
	require.Equal(t, EventSucceeded, ev.Type)
	require.Equal(t, "lr_1", ev.Data.ID)
	require.JSONEq(t, `{"label_id":"lbl_1"}`, string(ev.Data.Label))

	// During a rotation: one signature per live secret, either verifies.
	both := sign(t, other, "msg_lr_1", now.Unix(), body) + " " + sign(t, secret, "msg_lr_1", now.Unix(), body)
	_, err = VerifyWebhook(secret, headers(now.Unix(), both), body, now)
	require.NoError(t, err)
	_, err = VerifyWebhook(other, headers(now.Unix(), both), body, now)
	require.NoError(t, err)

	// Within five minutes either way, not beyond.
	for _, skew := range []time.Duration{-5 * time.Minute, 5 * time.Minute} {
		ts := now.Add(skew).Unix()
		_, err = VerifyWebhook(secret, headers(ts, sign(t, secret, "msg_lr_1", ts, body)), body, now)
		require.NoError(t, err, skew)
	}
	for _, skew := range []time.Duration{-5*time.Minute - time.Second, 5*time.Minute + time.Second} {
		ts := now.Add(skew).Unix()
		_, err = VerifyWebhook(secret, headers(ts, sign(t, secret, "msg_lr_1", ts, body)), body, now)
		require.ErrorIs(t, err, ErrWebhookSignature, skew)
	}

	for name, tc := range map[string]struct {
		secret string
		h      http.Header
		body   []byte
	}{
		"another secret":  {other, headers(now.Unix(), sign(t, secret, "msg_lr_1", now.Unix(), body)), body},
		"a changed body":  {secret, headers(now.Unix(), sign(t, secret, "msg_lr_1", now.Unix(), body)), append([]byte(" "), body...)},
		"another id":      {secret, headers(now.Unix(), sign(t, secret, "msg_lr_2", now.Unix(), body)), body},
		"another time":    {secret, headers(now.Unix(), sign(t, secret, "msg_lr_1", now.Unix()-1, body)), body},
		"another version": {secret, headers(now.Unix(), "v2"+sign(t, secret, "msg_lr_1", now.Unix(), body)[2:]), body},
		"no signature":    {secret, headers(now.Unix(), ""), body},
		"a bad timestamp": {secret, func() http.Header { h := headers(0, "v1,x"); h.Set("webhook-timestamp", "soon"); return h }(), body},
	} {
		_, err := VerifyWebhook(tc.secret, tc.h, tc.body, now)
		require.True(t, errors.Is(err, ErrWebhookSignature), "%s: %v", name, err)
	}
}
