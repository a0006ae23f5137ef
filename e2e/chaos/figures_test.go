package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Figures is what a run measured and found. Violations lists every check
// that did not hold; a run is good when it is empty.
type Figures struct {
	Config Config

	// The intents: Pairs of one intent per caller for the same parcel;
	// SharedKeys of those pairs use the same key string in both callers.
	Intents, Pairs, SharedKeys int
	// Requests the callers sent, and every answer by status; NetworkErrors
	// are requests that got no answer (refused, reset, timed out).
	Posts, Gets, NetworkErrors int
	Answers                    map[int]int
	// Other5xx counts answers that were a 5xx other than 503; Unexpected
	// counts answers outside the contract for valid requests (listed in
	// Violations).
	Other5xx, Unexpected int

	// What the database holds after the drain.
	DBIntents, Succeeded, Failed, Pending, Labels int
	// NeverAccepted counts intents none of whose requests was accepted.
	NeverAccepted int

	// What the carrier simulator did.
	CarrierPurchases                             int
	CarrierCalls, Carrier503, CarrierDropped     int64
	CarrierTimedOut, CarrierReplays              int64
	CarrierInProgress                            int64
	MinPurchasesPerIntent, MaxPurchasesPerIntent int
	IntentsNotBoughtOnce                         int

	// ReplaysChecked intents were replayed twice after the drain and read
	// with GET /v1/labels/{id}; ReplayMismatches of them gave different bytes.
	ReplaysChecked, ReplayMismatches int

	// The disturbances, and what they did to the workers: leases taken over
	// after they expired, and attempts that lost theirs and wrote nothing.
	WorkerKills, APIKills, DBRestarts int
	LeaseTakeovers, FencedAttempts    int

	// The webhooks: FinalIntents in the database, WebhookIDs distinct
	// webhook-ids the receiver verified (one per final intent), the requests
	// it got (WebhookRefused of them answered 503 on purpose; redeliveries of
	// an event already delivered in WebhookRedelivered), WebhooksLost final
	// intents whose event never arrived, WebhookUnverified deliveries that
	// did not verify.
	FinalIntents, WebhookIDs, WebhookRequests, WebhookRefused int
	WebhookRedelivered, WebhooksLost, WebhookUnverified       int

	// NoRetryAfter counts the 503 answers without Retry-After.
	NoRetryAfter int

	// An HA run: each step's figures; Acknowledged distinct intents got a
	// 202, Lost of them are missing on the primary at the end; the workers'
	// pids, and how many purchases each completed after the last step.
	HA                   []StepFigures
	Acknowledged, Lost   int
	WorkerPIDs           []int
	WorkerPurchasesAfter []int

	// Drain is the time from the end of the window until the last accepted
	// intent became final; Elapsed the whole run, the build included.
	Drain, Elapsed time.Duration

	Violations []string

	mu sync.Mutex
}

// OK reports whether every check held.
func (f *Figures) OK() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.Violations) == 0
}

func (f *Figures) violate(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Violations = append(f.Violations, fmt.Sprintf(format, args...))
}

func (f *Figures) addReplays(n int) {
	f.mu.Lock()
	f.ReplaysChecked += n
	f.mu.Unlock()
}

func (f *Figures) addReplayMismatch() {
	f.mu.Lock()
	f.ReplayMismatches++
	f.mu.Unlock()
}

func (f *Figures) addNeverAccepted() {
	f.mu.Lock()
	f.NeverAccepted++
	f.mu.Unlock()
}

// maxListed bounds the violations Print lists.
const maxListed = 25

// Print writes the figures, one per line, then the verdict.
func (f *Figures) Print(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.Config
	p := func(name, format string, args ...any) {
		fmt.Fprintf(w, "  %-40s %s\n", name, fmt.Sprintf(format, args...))
	}
	if c.HA != nil {
		fmt.Fprintf(w, "Failover run: seed %d, %d intents, %s window, %d APIs, %d workers\n", c.Seed, c.Intents, c.Duration, c.APIs, c.Workers)
	} else {
		fmt.Fprintf(w, "Chaos run: seed %d, %d intents, %s window, %d workers, a worker SIGKILLed every %s\n",
			c.Seed, c.Intents, c.Duration, c.Workers, killEvery(c.KillEvery))
	}
	if c.PoolerSize > 0 {
		p("pooler", "PgBouncer, transaction mode, %d server connections", c.PoolerSize)
	}
	p("intents", "%d from 2 callers (%d parcels asked for by both, %d of them under the same key string)", f.Intents, f.Pairs, f.SharedKeys)
	p("disturbances", "%d worker SIGKILLs, %d API SIGKILL, %d PostgreSQL restart", f.WorkerKills, f.APIKills, f.DBRestarts)
	p("leases", "%d taken over after expiring, %d attempts fenced (wrote nothing)", f.LeaseTakeovers, f.FencedAttempts)
	p("requests", "%d POST, %d GET; answers %s; %d without an answer", f.Posts, f.Gets, answers(f.Answers), f.NetworkErrors)
	p("carrier calls", "%d: %d answered 503, %d replies dropped, %d timed out, %d replays, %d in progress",
		f.CarrierCalls, f.Carrier503, f.CarrierDropped, f.CarrierTimedOut, f.CarrierReplays, f.CarrierInProgress)
	p("accepted intents reaching a final state", "%d of %d (succeeded %d, failed %d, pending %d; never accepted %d)",
		f.Succeeded+f.Failed, f.Intents, f.Succeeded, f.Failed, f.Pending, f.NeverAccepted)
	p("carrier purchases per intent", "min %d, max %d; intents not bought exactly once: %d", f.MinPurchasesPerIntent, f.MaxPurchasesPerIntent, f.IntentsNotBoughtOnce)
	p("carrier purchases total", "%d for %d intents (labels in the database: %d)", f.CarrierPurchases, f.Intents, f.Labels)
	p("replays byte-identical", "%d of %d completed intents (2 replays + GET /v1/labels/{id} + every 201 seen)", f.ReplaysChecked-f.ReplayMismatches, f.ReplaysChecked)
	p("webhooks", "%d distinct webhook-ids for %d final intents; %d lost; %d requests (%d answered 503 on purpose, %d redeliveries, %d not verified)",
		f.WebhookIDs, f.FinalIntents, f.WebhooksLost, f.WebhookRequests, f.WebhookRefused, f.WebhookRedelivered, f.WebhookUnverified)
	f.printHA(p)
	p("5xx answers other than 503", "%d", f.Other5xx)
	p("unexpected answers", "%d", f.Unexpected)
	p("time to drain", "%.1fs after the window", f.Drain.Seconds())
	p("run time", "%.1fs", f.Elapsed.Seconds())
	if len(f.Violations) == 0 {
		fmt.Fprintln(w, "OK: every check held")
		return
	}
	fmt.Fprintf(w, "FAILED: %d violations\n", len(f.Violations))
	for i, v := range f.Violations {
		if i == maxListed {
			fmt.Fprintf(w, "  … and %d more\n", len(f.Violations)-maxListed)
			break
		}
		fmt.Fprintf(w, "  - %s\n", strings.ReplaceAll(v, "\n", "\n    "))
	}
}

func killEvery(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.String()
}

// answers renders a count by status code, in the codes' order: "200×3 503×1".
func answers(m map[int]int) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d×%d", c, m[c]))
	}
	return strings.Join(parts, " ")
}
