package reconcile_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/reconcile"
)

// hostileInvoice bills five charges of no label of ours, whose text fields
// are formulas a spreadsheet would run, and numbers it would not.
var hostileInvoice = invoice(
	`INV-H,1,2026-12-02T01:00:00Z,=cmd|'/c calc'!A1,+SUM(1+1),,,612,USD`,
	`"=HYPERLINK(""http://x"",""y"")",2,2026-12-02T01:10:00Z,CL-H2,GRD-H2,,@foo,845,USD`,
	"INV-H,3,2026-12-02T01:20:00Z,CL-H3,GRD-H3,\"\tcarrier:tab\",\"\rref-cr\",-12,USD",
	`-INV-4,4,2026-12-02T01:30:00Z,-12,-1.5,,'=already,300,USD`,
	`@INV-5,5,2026-12-02T01:40:00Z,+CL-5,-GRD-5,,,400,USD`,
)

// The CSV and text reports neutralise every value a spreadsheet would read
// as a formula (testdata/hostile.{csv,txt}, go test -update rewrites them);
// the JSON report keeps every value as the invoice has it.
func TestHostileFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep := b.run(t, hostileInvoice, func(o *reconcile.Opts) { o.Source = "=invoice.csv" })
	require.Equal(t, counts(reconcile.BilledWithoutLabel, 5), rep.Counts)

	var text, csvOut, jsonOut bytes.Buffer
	require.NoError(t, rep.WriteText(b.ctx, &text))
	require.NoError(t, rep.WriteCSV(b.ctx, &csvOut))
	require.NoError(t, rep.WriteJSON(b.ctx, &jsonOut))
	golden(t, "hostile.txt", text.Bytes())
	golden(t, "hostile.csv", csvOut.Bytes())

	// No cell of the CSV begins as a formula, and every hostile value is
	// there, behind its quote.
	rows, err := csv.NewReader(bytes.NewReader(csvOut.Bytes())).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 6)
	var cells []string
	for _, row := range rows {
		for _, cell := range row {
			if cell != "" {
				require.NotContains(t, "=+@\t\r", cell[:1], "cell %q", cell)
				if cell[0] == '-' {
					require.Contains(t, []string{"-12", "-1.5"}, cell, "a minus sign before anything but a number")
				}
			}
		}
		cells = append(cells, row...)
	}
	for _, want := range []string{
		`'=cmd|'/c calc'!A1`, `'+SUM(1+1)`, `'=HYPERLINK("http://x","y")`, `'@foo`, "'\tcarrier:tab", "'\rref-cr",
		`'-INV-4`, `-12`, `-1.5`, `'=already`, `'@INV-5`, `'+CL-5`, `'-GRD-5`,
	} {
		require.Contains(t, cells, want)
	}

	// The JSON report is exact.
	var doc struct {
		Source string `json:"source"`
		Items  []struct {
			InvoiceNo      string `json:"invoice_no"`
			CarrierKey     string `json:"carrier_key"`
			Reference      string `json:"reference"`
			CarrierLabelID string `json:"carrier_label_id"`
			TrackingNo     string `json:"tracking_no"`
			BilledCents    int64  `json:"billed_cents"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(jsonOut.Bytes(), &doc))
	require.Equal(t, "=invoice.csv", doc.Source)
	var values []string
	for _, it := range doc.Items {
		values = append(values, it.InvoiceNo, it.CarrierKey, it.Reference, it.CarrierLabelID, it.TrackingNo)
	}
	for _, want := range []string{
		`=cmd|'/c calc'!A1`, `+SUM(1+1)`, `=HYPERLINK("http://x","y")`, `@foo`, "\tcarrier:tab", "\rref-cr",
		`-INV-4`, `-12`, `-1.5`, `'=already`, `@INV-5`, `+CL-5`, `-GRD-5`,
	} {
		require.Contains(t, values, want)
		require.NotContains(t, values, "'"+want, "no quote added to the JSON")
	}
	require.True(t, strings.HasPrefix(text.String(), "reconcile run 1: '=invoice.csv\n"), text.String())
}
