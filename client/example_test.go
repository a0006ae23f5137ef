package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/labelkit/labels/client"
)

// The seed's Fulfilment loop: one label for every packed parcel. The key is
// derived from the parcel, so every retry, and every later run after a crash,
// names the same intent. Here the network loses the first reply to every
// request: each loss costs a retry, never a second label.
func ExampleClient_CreateLabel() {
	api := newLossyAPI() // stands in for the label service: see below
	srv := httptest.NewServer(api)
	defer srv.Close()

	labelService := client.New(srv.URL, "lk_fulfilment_token",
		client.WithBackoff(time.Millisecond, 10*time.Millisecond)) // short, for the example
	shipTo := client.Address{Name: "A. Example", Line1: "1 Example Street", City: "Exampleton", PostalCode: "10115", Country: "DE"}
	packed := []client.Parcel{
		{OrderID: 918273, ParcelNo: 1, WeightG: 1450, Service: "ground", ShipTo: shipTo},
		{OrderID: 918273, ParcelNo: 2, WeightG: 800, Service: "ground", ShipTo: shipTo},
	}

	for _, parcel := range packed {
		// The caller's deadline bounds retries and waiting together.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		label, err := labelService.CreateLabel(ctx, parcel) // key: label:918273:1:v1, on every attempt
		cancel()

		var rejected *client.RejectedError
		switch {
		case err == nil:
			fmt.Printf("%s: %s\n", client.DeriveKey(parcel), label.TrackingNo)
		case errors.As(err, &rejected):
			// Final: the carrier refused the parcel. Fix it, then ask under a new key.
			fmt.Printf("%s: rejected (%s): %s\n", client.DeriveKey(parcel), rejected.CarrierCode, rejected.CarrierMessage)
		case client.IsTemporary(err):
			// Outcome unknown or still pending: the next run asks again with
			// the same parcel, so the same key, and gets this intent's label.
			fmt.Printf("%s: try again on the next run\n", client.DeriveKey(parcel))
		default:
			// A reused key, an invalid parcel, a saved carrier_unavailable: needs a person.
			fmt.Printf("%s: %v\n", client.DeriveKey(parcel), err)
		}
	}
	fmt.Println("labels bought:", api.bought())
	// Output:
	// label:918273:1:v1: GRD000918273
	// label:918273:2:v1: GRD000918273-2
	// labels bought: 2
}

// The key names the intent "a label for this parcel, this version"; a
// reprint is a new version, so a new key.
func ExampleDeriveKey() {
	p := client.Parcel{OrderID: 918273, ParcelNo: 1}
	fmt.Println(client.DeriveKey(p))
	p.LabelVersion = 2
	fmt.Println(client.DeriveKey(p))
	// Output:
	// label:918273:1:v1
	// label:918273:1:v2
}

// lossyAPI is a stand-in for the label service that keeps only what this
// example needs: it answers a repeated key from what it saved, and it loses
// its first reply to every key, as a network does now and then.
type lossyAPI struct {
	mu    sync.Mutex
	saved map[string][]byte // key → the 201 body saved when the label was bought
}

func newLossyAPI() *lossyAPI { return &lossyAPI{saved: map[string][]byte{}} }

func (a *lossyAPI) bought() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.saved)
}

func (a *lossyAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	var p client.Parcel
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || key == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	body, repeat := a.saved[key]
	if !repeat {
		tracking := fmt.Sprintf("GRD%09d", p.OrderID)
		if p.ParcelNo > 1 {
			tracking += fmt.Sprintf("-%d", p.ParcelNo)
		}
		body, _ = json.Marshal(client.Label{
			LabelID: fmt.Sprintf("lbl_%d_%d", p.OrderID, p.ParcelNo), OrderID: p.OrderID, ParcelNo: p.ParcelNo,
			LabelVersion: p.LabelVersion, Service: p.Service, TrackingNo: tracking, CarrierLabelID: "CL-1",
			CostCents: 595, Currency: "USD", CreatedAt: time.Date(2026, 12, 2, 10, 0, 1, 0, time.UTC),
		})
		a.saved[key] = body
	}
	a.mu.Unlock()
	if !repeat {
		// Bought, and the reply is lost on the way back.
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}
