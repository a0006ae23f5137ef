package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/reconcile"
)

// The rows of the seed's table "How idempotency quietly fails" that no other
// test covers; docs/failure-modes.md maps every row to its test.

// Effect and record in different stores: a crash between the steps of the
// completion leaves neither the label nor the completed key, and the retry
// that follows writes both, with the label bought once. The crash is a
// trigger that fails the completion transaction at one of its steps for as
// long as a switch is on; a sequence counts the crashes, since a rolled-back
// transaction leaves nothing else behind. A crashed attempt keeps its lease;
// the test plays that lease running out (ExpireLease) rather than waiting for
// a short one, and no deadline is short enough to race the work: the lease
// and the carrier timeout are far longer than any attempt on a busy machine.
func TestEffectAndRecordCommitTogether(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		trigger string // where the completion dies
	}{
		// The key is completed and the label inserted; the intent is not yet marked.
		{"after the label insert", `CREATE TRIGGER crash AFTER INSERT ON labels FOR EACH ROW EXECUTE FUNCTION crash()`},
		// Every write is done; only the commit is left.
		{"after the last write", `CREATE TRIGGER crash AFTER UPDATE ON label_intents FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION crash()`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stacktest.New(t, stacktest.Opts{LeaseDuration: 2 * time.Minute, CarrierTimeout: time.Minute})
			ctx := context.Background()
			for _, sql := range []string{
				`CREATE TABLE crash_switch (crashing boolean NOT NULL)`,
				`INSERT INTO crash_switch VALUES (true)`,
				`CREATE SEQUENCE crashes`,
				`CREATE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF (SELECT crashing FROM crash_switch) THEN
						PERFORM nextval('crashes');
						RAISE EXCEPTION 'injected crash inside the completion';
					END IF;
					RETURN NEW;
				END $$`,
				tc.trigger,
			} {
				_, err := s.Pool.Exec(ctx, sql)
				require.NoError(t, err, sql)
			}
			crashes := func() int {
				return s.Count(`SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM crashes`)
			}

			tok := s.Token("fulfilment")
			body := stacktest.ParcelBody(918273, 1, 1450)
			id := s.Accept(tok, "label:918273:1:v1", body).ID

			// Two attempts bought the label (the second under the same carrier key
			// gets it back) and died before their commit, each crashing once in
			// its completion. Each crash leaves the lease behind; it runs out.
			require.Eventually(t, func() bool {
				s.ExpireLease(id)
				return s.Carrier.Calls() >= 2 && crashes() >= 3
			}, time.Minute, 20*time.Millisecond)
			require.Equal(t, 0, s.Count(`SELECT count(*) FROM labels`), "no label without its completed key")
			require.Equal(t, "started", dbtest.Scalar[string](t, s.Pool, `SELECT state::text FROM idempotency_keys`), "no completed key without its label")
			require.Equal(t, 0, s.Count(`SELECT count(*) FROM idempotency_keys WHERE response_body IS NOT NULL`))
			require.Equal(t, "pending", dbtest.Scalar[string](t, s.Pool, `SELECT status FROM label_intents WHERE request_id = $1`, id))
			repeat := s.Create(tok, "label:918273:1:v1", body)
			require.Equal(t, http.StatusAccepted, repeat.Status, "a repeat meanwhile is still pending: %s", repeat.Body)
			_, bought := s.Carrier.Purchases("")
			require.Equal(t, 1, bought)

			_, err := s.Pool.Exec(ctx, `UPDATE crash_switch SET crashing = false`)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				s.ExpireLease(id) // the last crash's lease runs out
				return dbtest.Scalar[string](t, s.Pool, `SELECT status FROM label_intents WHERE request_id = $1`, id) != "pending"
			}, time.Minute, 20*time.Millisecond)
			final := s.WaitFinal(tok, id)
			require.Contains(t, string(final.Body), `"status":"succeeded"`)

			// The label and the key committed together, with the one label bought.
			require.Equal(t, 1, s.Count(`SELECT count(*) FROM labels`))
			labelID := dbtest.Scalar[string](t, s.Pool, `SELECT label_id FROM labels`)
			require.Equal(t, "completed", dbtest.Scalar[string](t, s.Pool, `SELECT state::text FROM idempotency_keys`))
			saved := dbtest.Scalar[string](t, s.Pool, `SELECT response_body::text FROM idempotency_keys`)
			require.Contains(t, saved, `"label_id":"`+labelID+`"`)
			require.Contains(t, saved, `"carrier_label_id":"CL-1"`)
			_, bought = s.Carrier.Purchases("")
			require.Equal(t, 1, bought, "the retries bought nothing new")
			require.GreaterOrEqual(t, s.Carrier.Calls(), 2)

			replay := s.Create(tok, "label:918273:1:v1", body)
			require.Equal(t, http.StatusCreated, replay.Status)
			require.Equal(t, saved, string(replay.Body))
			require.Equal(t, saved, string(s.Do(http.MethodGet, "/v1/labels/"+labelID, tok, nil).Body))
		})
	}
}

// A downstream call sent without a key: a carrier that ignores the key sells
// a second label when the worker retries after a lost reply. Our records look
// right (one intent, one label, one completed key); the invoice bills two, and
// reconciliation flags the extra one. The same story against a carrier that
// honours the key sells one label, and everything matches.
func TestDownstreamWithoutKey(t *testing.T) {
	t.Parallel()
	seed := seedDroppingFirstReplyOnly(t)
	for _, tc := range []struct {
		name      string
		noKeys    bool
		purchases int
	}{
		{"the carrier ignores keys", true, 2},
		{"the carrier honours keys", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stacktest.NewSim(t, stacktest.SimOpts{Sim: sim.Options{NoKeys: tc.noKeys, DropReplyRate: dropRate, Seed: seed}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			parcel := client.Parcel{OrderID: 918273, ParcelNo: 1, WeightG: 1450, Service: "ground", ShipTo: client.Address{
				Name: "A. Example", Line1: "1 Example Street", City: "Exampleton", PostalCode: "10115", Country: "DE",
			}}
			label, err := client.New(s.URL, s.Token("fulfilment")).CreateLabel(ctx, parcel)
			require.NoError(t, err)

			// Our side: one intent, one label, one completed key.
			require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents WHERE status = 'succeeded'`))
			require.Equal(t, 1, s.Count(`SELECT count(*) FROM labels`))
			require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`))
			requestID := dbtest.Scalar[string](t, s.Pool, `SELECT request_id FROM label_intents`)

			// The carrier's side: the first reply was lost after the purchase, the
			// retry sent the same key; whether it bought again is up to the carrier.
			st := s.Sim.Stats()
			require.Equal(t, int64(1), st.Dropped)
			require.Equal(t, tc.purchases, st.Purchases)
			require.Equal(t, tc.purchases, st.ByKey[carrier.DeriveKey("fulfilment", client.DeriveKey(parcel))])
			require.Equal(t, tc.purchases, s.Purchases(918273, 1))
			var ours *sim.Purchase
			for _, p := range s.Sim.Purchases() {
				require.Equal(t, requestID, p.Reference, "every purchase was made for the one intent")
				if p.CarrierLabelID == label.CarrierLabelID {
					ours = &p
				}
			}
			require.NotNil(t, ours, "the label we recorded is one the carrier sold")

			rep := reconcileAll(t, s)
			if !tc.noKeys {
				require.Zero(t, rep.Discrepancies(), "%v", rep.Counts)
				require.Equal(t, 1, rep.Counts[reconcile.Matched])
				return
			}
			flagged := rep.Counts[reconcile.DuplicateCharge] + rep.Counts[reconcile.BilledWithoutLabel]
			require.Equal(t, 1, flagged, "the second purchase is flagged: %v", rep.Counts)
			var items []reconcile.Item
			for _, c := range []string{reconcile.DuplicateCharge, reconcile.BilledWithoutLabel} {
				items = append(items, rep.First[c]...)
			}
			require.Len(t, items, 1)
			t.Logf("flagged as %s: invoice %s line %d, carrier label %s, reference %s", items[0].Category, items[0].InvoiceNo, items[0].LineNo, items[0].CarrierLabelID, items[0].Reference)
			require.NotEqual(t, label.CarrierLabelID, items[0].CarrierLabelID, "the extra charge is the label we did not record")
			require.Equal(t, requestID, items[0].Reference, "and it names the intent it was bought for")
		})
	}
}

// dropRate is the simulator's share of dropped replies in TestDownstreamWithoutKey.
const dropRate = 0.5

// seedDroppingFirstReplyOnly finds a simulator seed whose first purchase has
// its reply dropped and whose second does not: the simulator draws each
// call's fate from its seed alone, so the n-th call of a run with that seed
// gets the same fate. It asks a throwaway simulator, call by call.
func seedDroppingFirstReplyOnly(t *testing.T) int64 {
	t.Helper()
	req := carrier.PurchaseRequest{Reference: "probe", OrderID: 1, ParcelNo: 1, WeightG: 100, Service: "ground",
		ShipTo: carrier.Address{Name: "n", Line1: "l", City: "c", PostalCode: "1", Country: "DE"}}
	ctx := context.Background()
	for seed := int64(1); seed <= 100; seed++ {
		s, err := sim.New(&sim.Options{DropReplyRate: dropRate, Seed: seed})
		require.NoError(t, err)
		srv := httptest.NewServer(s)
		c := carrier.NewClient(srv.URL, &carrier.ClientOpts{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
		_, err1 := c.Buy(ctx, "carrier:probe-1", req)
		_, err2 := c.Buy(ctx, "carrier:probe-2", req)
		srv.Close()
		_ = s.Close()
		var unknown *carrier.UnknownOutcomeError
		if errors.As(err1, &unknown) && err2 == nil {
			return seed
		}
	}
	t.Fatal("no seed in 1..100 drops the first reply and not the second")
	return 0
}

// reconcileAll runs reconciliation on the simulator's invoice of every day
// it sold on (one, unless the test straddles midnight UTC), and adds up the
// reports.
func reconcileAll(t *testing.T, s *stacktest.SimStack) *reconcile.Report {
	t.Helper()
	ctx := context.Background()
	days := map[string]time.Time{}
	for _, p := range s.Sim.Purchases() {
		d := p.PurchasedAt.UTC().Truncate(24 * time.Hour)
		days[d.Format(time.DateOnly)] = d
	}
	total := &reconcile.Report{Counts: map[string]int{}, First: map[string][]reconcile.Item{}}
	for name, day := range days {
		var invoice bytes.Buffer
		require.NoError(t, s.Sim.WriteInvoice(&invoice, day))
		require.True(t, strings.HasPrefix(invoice.String(), sim.InvoiceHeader))
		rep, err := reconcile.Run(ctx, s.Pool, reconcile.Opts{
			Invoice:    bytes.NewReader(invoice.Bytes()),
			Source:     "sim:" + name,
			Day:        day,
			StuckAfter: time.Hour,
		})
		require.NoError(t, err)
		for c, n := range rep.Counts {
			total.Counts[c] += n
		}
		for c, items := range rep.First {
			total.First[c] = append(total.First[c], items...)
		}
	}
	return total
}
