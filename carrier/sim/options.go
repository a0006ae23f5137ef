package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// DefaultTimeoutDelay is how long a timed-out call keeps the client waiting when
// Options.TimeoutDelay is zero: longer than the worker's CARRIER_TIMEOUT (20s).
const DefaultTimeoutDelay = 30 * time.Second

// DefaultVoidWindow is how long after its purchase a label may be voided when
// Options.VoidWindow is zero.
const DefaultVoidWindow = 720 * time.Hour

// AmountChangeCents is what a re-weigh adds to a billed amount.
const AmountChangeCents = 150

// Options sets how the simulator behaves. The zero value is a well-behaved
// carrier with keys.
type Options struct {
	// Token, when set, is the bearer token every call must carry.
	Token string

	// Latency is added to every purchase call.
	Latency time.Duration
	// LatencyJitter is the most a uniform random extra adds to Latency.
	LatencyJitter time.Duration
	// FailRate is the share of purchase calls answered 503 before buying.
	FailRate float64
	// DropReplyRate is the share of purchases whose reply is dropped: the label
	// is bought, then the connection is closed without an answer.
	DropReplyRate float64
	// TimeoutRate is the share of purchases that wait TimeoutDelay (or until the
	// client hangs up) and then buy anyway.
	TimeoutRate float64
	// TimeoutDelay is how long a timed-out call waits; zero means
	// [DefaultTimeoutDelay].
	TimeoutDelay time.Duration
	// RejectPostalCode, when set, is a postal code always rejected with 422.
	RejectPostalCode string
	// NoKeys makes the carrier ignore Idempotency-Key: every call buys again.
	NoKeys bool
	// Seed seeds the random source of the misbehaviour and of invoice errors.
	Seed int64

	// DuplicateLineRate is the share of labels billed twice.
	DuplicateLineRate float64
	// AmountChangeRate is the share of labels billed AmountChangeCents more than
	// they cost (a re-weigh).
	AmountChangeRate float64
	// ForeignLineRate is the share of labels followed on the invoice by a line
	// with no label of ours (a new label id, no key, no reference).
	ForeignLineRate float64
	// CreditRate is the share of labels billed twice and then credited once (a
	// negative line), which nets out.
	CreditRate float64

	// StateFile, when set, is the JSON Lines journal purchases and voids are
	// kept in. It is read at construction and cannot change afterwards.
	StateFile string

	// VoidWindow is how long after its purchase a label may be voided; later
	// voids answer 409 void_window_closed. Zero means [DefaultVoidWindow]. It
	// is set at construction (POST /sim/clock ages labels instead).
	VoidWindow time.Duration

	// NowFunc tells the time of a purchase; nil means time.Now.
	NowFunc func() time.Time
}

// BillingMix is the share of labels that get each billing error on an invoice.
// The shares are exclusive (a label gets at most one) and must sum to at most 1.
type BillingMix struct {
	DuplicateLineRate float64 `json:"duplicate_line_rate"`
	AmountChangeRate  float64 `json:"amount_change_rate"`
	ForeignLineRate   float64 `json:"foreign_line_rate"`
	CreditRate        float64 `json:"credit_rate"`
}

// BillingMix returns the billing error shares of o.
func (o *Options) BillingMix() BillingMix {
	return BillingMix{
		DuplicateLineRate: o.DuplicateLineRate,
		AmountChangeRate:  o.AmountChangeRate,
		ForeignLineRate:   o.ForeignLineRate,
		CreditRate:        o.CreditRate,
	}
}

// Validate reports the first option out of range.
func (o *Options) Validate() error {
	if err := validateRates(
		rate{"fail_rate", o.FailRate},
		rate{"drop_reply_rate", o.DropReplyRate},
		rate{"timeout_rate", o.TimeoutRate},
	); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"latency", o.Latency},
		{"latency_jitter", o.LatencyJitter},
		{"timeout_delay", o.TimeoutDelay},
		{"void_window", o.VoidWindow},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s must not be negative, got %s", d.name, d.v)
		}
	}
	return o.BillingMix().Validate()
}

// Validate reports a share out of [0, 1] or shares summing to more than 1.
func (m BillingMix) Validate() error {
	if err := validateRates(
		rate{"duplicate_line_rate", m.DuplicateLineRate},
		rate{"amount_change_rate", m.AmountChangeRate},
		rate{"foreign_line_rate", m.ForeignLineRate},
		rate{"credit_rate", m.CreditRate},
	); err != nil {
		return err
	}
	if sum := m.DuplicateLineRate + m.AmountChangeRate + m.ForeignLineRate + m.CreditRate; sum > 1+1e-9 {
		return fmt.Errorf("billing error rates sum to %g, at most 1", sum)
	}
	return nil
}

// rate is an option that is a probability, named as in messages.
type rate struct {
	name string
	v    float64
}

// validateRates reports the first rate out of [0, 1].
func validateRates(rates ...rate) error {
	for _, r := range rates {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return fmt.Errorf("%s must be between 0 and 1, got %v", r.name, r.v)
		}
	}
	return nil
}

// normalize fills in defaults.
func (o *Options) normalize() {
	if o.TimeoutDelay == 0 {
		o.TimeoutDelay = DefaultTimeoutDelay
	}
	if o.VoidWindow == 0 {
		o.VoidWindow = DefaultVoidWindow
	}
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
}

// optionsJSON is the shape of /sim/config. Decoding into one filled from the
// current options gives a POST its merge semantics: fields it leaves out keep
// their value.
type optionsJSON struct {
	Token             string   `json:"token,omitempty"`
	Latency           duration `json:"latency"`
	LatencyJitter     duration `json:"latency_jitter"`
	FailRate          float64  `json:"fail_rate"`
	DropReplyRate     float64  `json:"drop_reply_rate"`
	TimeoutRate       float64  `json:"timeout_rate"`
	TimeoutDelay      duration `json:"timeout_delay"`
	RejectPostalCode  string   `json:"reject_postal_code"`
	NoKeys            bool     `json:"no_keys"`
	Seed              int64    `json:"seed"`
	DuplicateLineRate float64  `json:"duplicate_line_rate"`
	AmountChangeRate  float64  `json:"amount_change_rate"`
	ForeignLineRate   float64  `json:"foreign_line_rate"`
	CreditRate        float64  `json:"credit_rate"`
	StateFile         string   `json:"state_file,omitempty"`
}

func toJSON(o Options) optionsJSON {
	return optionsJSON{
		Token:             o.Token,
		Latency:           duration(o.Latency),
		LatencyJitter:     duration(o.LatencyJitter),
		FailRate:          o.FailRate,
		DropReplyRate:     o.DropReplyRate,
		TimeoutRate:       o.TimeoutRate,
		TimeoutDelay:      duration(o.TimeoutDelay),
		RejectPostalCode:  o.RejectPostalCode,
		NoKeys:            o.NoKeys,
		Seed:              o.Seed,
		DuplicateLineRate: o.DuplicateLineRate,
		AmountChangeRate:  o.AmountChangeRate,
		ForeignLineRate:   o.ForeignLineRate,
		CreditRate:        o.CreditRate,
		StateFile:         o.StateFile,
	}
}

// apply returns base with the fields of j.
func (j optionsJSON) apply(base Options) Options {
	base.Token = j.Token
	base.Latency = time.Duration(j.Latency)
	base.LatencyJitter = time.Duration(j.LatencyJitter)
	base.FailRate = j.FailRate
	base.DropReplyRate = j.DropReplyRate
	base.TimeoutRate = j.TimeoutRate
	base.TimeoutDelay = time.Duration(j.TimeoutDelay)
	base.RejectPostalCode = j.RejectPostalCode
	base.NoKeys = j.NoKeys
	base.Seed = j.Seed
	base.DuplicateLineRate = j.DuplicateLineRate
	base.AmountChangeRate = j.AmountChangeRate
	base.ForeignLineRate = j.ForeignLineRate
	base.CreditRate = j.CreditRate
	base.StateFile = j.StateFile
	return base
}

// duration is a time.Duration that reads and writes Go's syntax ("500ms") in
// JSON; a bare number is read as nanoseconds, as time.Duration's own JSON.
type duration time.Duration

func (d duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return errors.New("a duration is a string like \"500ms\" or a number of nanoseconds")
	}
	*d = duration(n)
	return nil
}
