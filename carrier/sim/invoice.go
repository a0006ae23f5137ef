package sim

import (
	"bufio"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels/carrier"
)

// InvoiceHeader is the first line of every invoice of a day without a void.
const InvoiceHeader = "invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency"

// ChargeTypeColumn is the column an invoice carries when it credits a void:
// ChargeTypeCharge on a charge, ChargeTypeVoidCredit on the credit of a void.
const (
	ChargeTypeColumn     = "charge_type"
	ChargeTypeCharge     = "charge"
	ChargeTypeVoidCredit = "void_credit"
)

// Billing kinds, as [TruthLabel.Billing] names them.
const (
	BillingMatched      = "matched"       // one line at the label's cost
	BillingDuplicate    = "duplicate"     // two identical lines
	BillingAmountChange = "amount_change" // one line at cost + AmountChangeCents
	BillingCredit       = "credit"        // two lines at cost, then one at -cost
)

// billing is how one label is billed; billForeign bills it normally and adds a
// line with no label of ours after it.
type billing int

const (
	billNormal billing = iota
	billDuplicate
	billAmountChange
	billCredit
	billForeign
)

// pick maps a uniform draw in [0, 1) onto the mix's exclusive shares.
func (m BillingMix) pick(u float64) billing {
	switch {
	case u < m.DuplicateLineRate:
		return billDuplicate
	case u < m.DuplicateLineRate+m.AmountChangeRate:
		return billAmountChange
	case u < m.DuplicateLineRate+m.AmountChangeRate+m.CreditRate:
		return billCredit
	case u < m.DuplicateLineRate+m.AmountChangeRate+m.CreditRate+m.ForeignLineRate:
		return billForeign
	}
	return billNormal
}

// lines is how many invoice lines a billing takes.
func (b billing) lines() int {
	switch b {
	case billDuplicate, billForeign:
		return 2
	case billCredit:
		return 3
	}
	return 1
}

func (b billing) name() string {
	switch b {
	case billDuplicate:
		return BillingDuplicate
	case billAmountChange:
		return BillingAmountChange
	case billCredit:
		return BillingCredit
	}
	return BillingMatched
}

// invoiceLine is one charge, before it gets its line number.
type invoiceLine struct {
	billedAt       time.Time
	labelID        string
	trackingNo     string
	idempotencyKey string
	reference      string
	costCents      int64
	currency       string
	voidCredit     bool
}

// invoiceWriter numbers and writes the lines of one day's invoice.
type invoiceWriter struct {
	cw         *csv.Writer
	invoiceNo  string
	lines      int
	record     []string
	chargeType bool // the charge_type column is there
}

// dayStart returns UTC midnight of day's calendar date (in day's location).
func dayStart(day time.Time) time.Time {
	y, m, d := day.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func newInvoiceWriter(w io.Writer, day time.Time, chargeType bool) (*invoiceWriter, error) {
	iw := &invoiceWriter{
		cw:         csv.NewWriter(w),
		invoiceNo:  "INV-" + day.Format("20060102"),
		record:     make([]string, 9),
		chargeType: chargeType,
	}
	header := strings.Split(InvoiceHeader, ",")
	if chargeType {
		header = append(header, ChargeTypeColumn)
		iw.record = make([]string, 10)
	}
	if err := iw.cw.Write(header); err != nil {
		return nil, err
	}
	return iw, nil
}

func (iw *invoiceWriter) write(l invoiceLine) error {
	iw.lines++
	r := iw.record
	r[0] = iw.invoiceNo
	r[1] = strconv.Itoa(iw.lines)
	r[2] = l.billedAt.UTC().Format(time.RFC3339)
	r[3] = l.labelID
	r[4] = l.trackingNo
	r[5] = l.idempotencyKey
	r[6] = l.reference
	r[7] = strconv.FormatInt(l.costCents, 10)
	r[8] = l.currency
	if iw.chargeType {
		r[9] = ChargeTypeCharge
		if l.voidCredit {
			r[9] = ChargeTypeVoidCredit
		}
	}
	return iw.cw.Write(r)
}

// bill writes the lines of one label billed as b; foreign makes the extra line
// of billForeign.
func (iw *invoiceWriter) bill(l invoiceLine, b billing, foreign func() invoiceLine) error {
	var lines []invoiceLine
	switch b {
	case billNormal:
		lines = []invoiceLine{l}
	case billDuplicate:
		lines = []invoiceLine{l, l}
	case billAmountChange:
		changed := l
		changed.costCents += AmountChangeCents
		lines = []invoiceLine{changed}
	case billCredit:
		credit := l
		credit.costCents = -l.costCents
		lines = []invoiceLine{l, l, credit}
	case billForeign:
		lines = []invoiceLine{l, foreign()}
	}
	for _, line := range lines {
		if err := iw.write(line); err != nil {
			return err
		}
	}
	return nil
}

func (iw *invoiceWriter) flush() error {
	iw.cw.Flush()
	return iw.cw.Error()
}

// foreignLine is a charge for someone else's label, billed next to ours.
func foreignLine(rng *rand.Rand, labelID string, billedAt time.Time) invoiceLine {
	svc := serviceNames[rng.IntN(len(serviceNames))]
	cost, _ := Cost(svc, 100+rng.IntN(20_000))
	return invoiceLine{
		billedAt:   billedAt,
		labelID:    labelID,
		trackingNo: fmt.Sprintf("%s%09d", services[svc].prefix, rng.Int64N(1_000_000_000)) + "-X",
		costCents:  cost,
		currency:   "USD",
	}
}

// WriteInvoice writes the invoice for the calendar date of day (in day's
// location, naming a UTC day): every purchase and every void of that UTC day,
// in the order they happened, the purchases with the billing errors of the
// options in force. A void is billed as a credit line of the voided label
// (its cost, negated, billed_at the void's time); the invoice of a day with
// a void carries the charge_type column (charge, or void_credit), which an
// invoice without one leaves out.
func (s *Server) WriteInvoice(w io.Writer, day time.Time) error {
	start := dayStart(day)
	end := start.AddDate(0, 0, 1)
	in := func(t time.Time) bool { return !t.Before(start) && t.Before(end) }
	s.mu.Lock()
	mix := s.opts.BillingMix()
	seed := s.opts.Seed
	var billed, credited []Purchase
	for _, p := range s.purchases {
		if in(p.PurchasedAt) {
			billed = append(billed, p)
		}
	}
	for _, v := range s.voids {
		if in(v.at) {
			p := s.purchases[v.index]
			p.event = v.event
			credited = append(credited, p)
		}
	}
	s.mu.Unlock()

	iw, err := newInvoiceWriter(w, start, len(credited) > 0)
	if err != nil {
		return err
	}
	for len(billed) > 0 || len(credited) > 0 {
		if len(credited) > 0 && (len(billed) == 0 || credited[0].event < billed[0].event) {
			p := credited[0]
			credited = credited[1:]
			if err := iw.write(creditLine(p)); err != nil {
				return err
			}
			continue
		}
		p := billed[0]
		billed = billed[1:]
		// A random source per label, not per invoice: the label's lines stay the
		// same when later purchases of the day are added.
		rng := labelRand(seed, p.CarrierLabelID)
		key := p.IdempotencyKey
		if p.KeyIgnored {
			key = ""
		}
		line := invoiceLine{
			billedAt:       p.PurchasedAt,
			labelID:        p.CarrierLabelID,
			trackingNo:     p.TrackingNo,
			idempotencyKey: key,
			reference:      p.Reference,
			costCents:      p.CostCents,
			currency:       p.Currency,
		}
		foreign := func() invoiceLine {
			return foreignLine(rng, "CL-F"+strconv.FormatInt(p.seq, 10), p.PurchasedAt)
		}
		if err := iw.bill(line, mix.pick(rng.Float64()), foreign); err != nil {
			return err
		}
	}
	return iw.flush()
}

// creditLine is the credit of a voided label: its charge reversed, under the
// same carrier label id, key and reference.
func creditLine(p Purchase) invoiceLine {
	key := p.IdempotencyKey
	if p.KeyIgnored {
		key = ""
	}
	return invoiceLine{
		billedAt:       *p.VoidedAt,
		labelID:        p.CarrierLabelID,
		trackingNo:     p.TrackingNo,
		idempotencyKey: key,
		reference:      p.Reference,
		costCents:      -p.CostCents,
		currency:       p.Currency,
		voidCredit:     true,
	}
}

func labelRand(seed int64, labelID string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(labelID))
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

func (s *Server) handleInvoice(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("date")
	day, err := time.Parse(time.DateOnly, q)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_date", fmt.Sprintf("date must be YYYY-MM-DD, got %q", q))
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	bw := bufio.NewWriterSize(w, 1<<16)
	// WriteInvoice only fails when the client stops reading: nobody to tell.
	if err := s.WriteInvoice(bw, day); err == nil {
		_ = bw.Flush()
	}
}

// Truth is what [WriteSyntheticInvoice] put into an invoice, for checking a
// reconciler against it.
type Truth struct {
	// Day is the billing day, YYYY-MM-DD.
	Day string `json:"day"`
	// InvoiceNo is INV-YYYYMMDD.
	InvoiceNo string `json:"invoice_no"`
	// Lines is the number of lines written, the header aside.
	Lines int `json:"lines"`
	// Matched counts labels billed once at their cost.
	Matched int `json:"matched"`
	// Duplicates counts labels billed twice.
	Duplicates int `json:"duplicates"`
	// AmountChanges counts labels billed once at cost + AmountChangeCents.
	AmountChanges int `json:"amount_changes"`
	// Credits counts labels billed twice and credited once (three lines that
	// net to the cost).
	Credits int `json:"credits"`
	// Foreign counts lines with no label of ours (no key, no reference).
	Foreign int `json:"foreign"`
	// Labels are our labels behind the other lines, in invoice order.
	Labels []TruthLabel `json:"labels"`
}

// TruthLabel is one of our labels on a synthetic invoice: what a benchmark loads
// into the database so that the invoice has something to match.
type TruthLabel struct {
	CarrierLabelID string `json:"carrier_label_id"`
	TrackingNo     string `json:"tracking_no"`
	// IdempotencyKey is carrier.DeriveKey(CallerID, CallerKey).
	IdempotencyKey string `json:"idempotency_key"`
	Reference      string `json:"reference"`
	// CostCents is what the label cost when bought: what our label row says,
	// not necessarily what the invoice billed.
	CostCents   int64     `json:"cost_cents"`
	Currency    string    `json:"currency"`
	PurchasedAt time.Time `json:"purchased_at"`
	CallerID    string    `json:"caller_id"`
	CallerKey   string    `json:"caller_key"`
	OrderID     int64     `json:"order_id"`
	ParcelNo    int       `json:"parcel_no"`
	Service     string    `json:"service"`
	WeightG     int       `json:"weight_g"`
	// Billing is how the invoice billed it: one of the Billing… constants.
	Billing string `json:"billing"`
}

// SyntheticCallerID is the caller every synthetic label belongs to.
const SyntheticCallerID = "synthetic"

// WriteSyntheticInvoice writes n lines for day with the given mix of billing
// errors, deterministic from seed; it also returns the "truth" so a
// test/benchmark can check a reconciler.
//
// Each label i (from 1) of day YYYYMMDD has order id YYYYMMDD×10⁷+i, label id
// "CL-" + that order id, caller key "inv-YYYYMMDD-i" under [SyntheticCallerID],
// a ULID-like reference, a random service and weight priced by [Cost], and a
// purchase time spread evenly over the day (billed_at is the same). Labels are
// drawn until n lines are written; a billing error whose lines would overrun n
// is billed normally instead, so the counts in [Truth] are exact. Foreign lines
// have label ids "CL-F…" and tracking numbers ending in "-X".
func WriteSyntheticInvoice(w io.Writer, day time.Time, n int, mix BillingMix, seed int64) (Truth, error) {
	if err := mix.Validate(); err != nil {
		return Truth{}, err
	}
	if n < 0 {
		return Truth{}, errors.New("synthetic invoice: negative number of lines")
	}
	start := dayStart(day)
	ymd := int64(start.Year()*10000 + int(start.Month())*100 + start.Day())
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(ymd)))
	step := 24 * time.Hour / time.Duration(max(n, 1))

	bw := bufio.NewWriterSize(w, 1<<16)
	iw, err := newInvoiceWriter(bw, start, false)
	if err != nil {
		return Truth{}, err
	}
	truth := Truth{Day: start.Format(time.DateOnly), InvoiceNo: iw.invoiceNo, Labels: make([]TruthLabel, 0, n)}
	for i := int64(1); iw.lines < n; i++ {
		b := mix.pick(rng.Float64())
		if b.lines() > n-iw.lines {
			b = billNormal
		}
		svc := serviceNames[rng.IntN(len(serviceNames))]
		weight := 100 + rng.IntN(20_000)
		cost, _ := Cost(svc, weight)
		at := start.Add(time.Duration(iw.lines) * step).Truncate(time.Second)
		orderID := ymd*10_000_000 + i
		callerKey := fmt.Sprintf("inv-%d-%d", ymd, i)
		label := TruthLabel{
			CarrierLabelID: fmt.Sprintf("CL-%d", orderID),
			TrackingNo:     fmt.Sprintf("%s%09d", services[svc].prefix, orderID),
			IdempotencyKey: carrier.DeriveKey(SyntheticCallerID, callerKey),
			Reference:      "lr_" + ulidLike(at, rng),
			CostCents:      cost,
			Currency:       "USD",
			PurchasedAt:    at,
			CallerID:       SyntheticCallerID,
			CallerKey:      callerKey,
			OrderID:        orderID,
			ParcelNo:       1,
			Service:        svc,
			WeightG:        weight,
			Billing:        b.name(),
		}
		line := invoiceLine{
			billedAt:       at,
			labelID:        label.CarrierLabelID,
			trackingNo:     label.TrackingNo,
			idempotencyKey: label.IdempotencyKey,
			reference:      label.Reference,
			costCents:      cost,
			currency:       "USD",
		}
		foreign := func() invoiceLine {
			return foreignLine(rng, fmt.Sprintf("CL-F%d", orderID), at)
		}
		if err := iw.bill(line, b, foreign); err != nil {
			return Truth{}, err
		}
		truth.Labels = append(truth.Labels, label)
		switch b {
		case billNormal:
			truth.Matched++
		case billDuplicate:
			truth.Duplicates++
		case billAmountChange:
			truth.AmountChanges++
		case billCredit:
			truth.Credits++
		case billForeign:
			truth.Matched++
			truth.Foreign++
		}
	}
	if err := iw.flush(); err != nil {
		return Truth{}, err
	}
	if err := bw.Flush(); err != nil {
		return Truth{}, err
	}
	truth.Lines = iw.lines
	return truth, nil
}

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ulidLike makes a 26-character ULID (48-bit milliseconds, 80 random bits, in
// Crockford base32) from a deterministic source, like our label request ids.
func ulidLike(t time.Time, rng *rand.Rand) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], uint64(t.UnixMilli())<<16)
	binary.BigEndian.PutUint64(b[8:16], rng.Uint64())
	binary.BigEndian.PutUint16(b[6:8], uint16(rng.Uint32()))
	hi, lo := binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
