package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

// resolver looks up the host of `api webhook set` (tests replace it).
var resolver webhook.Resolver = net.DefaultResolver

// ResealBatch is the default of `api webhook reseal --batch`: secrets
// re-sealed per statement.
const ResealBatch = 500

// webhookCmd runs `api webhook set|rotate|delete|list|reseal`. A secret is
// printed once, as the last line of stdout, and never logged: the only copy
// besides the database's is the operator's.
func webhookCmd(ctx context.Context, cfg Config, poolCfg *pgxpool.Config, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "api webhook: "+format+"\n", a...)
		return code
	}
	usage := "want: webhook set CALLER URL | webhook rotate CALLER | webhook delete CALLER | webhook list | webhook reseal [--batch N]; see api --help"
	if len(args) == 0 {
		return fail(2, "%s", usage)
	}
	batch := ResealBatch
	switch {
	case args[0] == "set" && len(args) == 3:
		url, err := webhook.CheckURL(ctx, args[2], cfg.webhookPolicy())
		if err != nil {
			return fail(2, "%s", err)
		}
		args[2] = url
		if err := cfg.webhookSecretKey.CanStore(); err != nil {
			return fail(2, "%s", err)
		}
	case args[0] == "rotate" && len(args) == 2:
		if err := cfg.webhookSecretKey.CanStore(); err != nil {
			return fail(2, "%s", err)
		}
	case args[0] == "delete" && len(args) == 2, args[0] == "list" && len(args) == 1:
	case args[0] == "reseal":
		fs := flag.NewFlagSet("api webhook reseal", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.IntVar(&batch, "batch", batch, "")
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 || batch < 1 || batch > 10000 {
			return fail(2, "want: webhook reseal [--batch N], N from 1 to 10000")
		}
		if !cfg.webhookSecretKey.Set() {
			return fail(2, "reseal seals with WEBHOOK_SECRET_KEY, which is not set")
		}
	default:
		return fail(2, "%s", usage)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer pool.Close()
	if err := migrations.Check(ctx, pool); err != nil {
		return fail(1, "%v", err)
	}
	switch args[0] {
	case "set":
		caller, url := args[1], args[2]
		printed, stored, err := newSecret(cfg, caller)
		if err != nil {
			return fail(1, "%v", err)
		}
		created, err := postgres.SetWebhook(ctx, pool, caller, url, stored)
		if errors.Is(err, postgres.ErrUnknownCaller) {
			return fail(2, "unknown caller %q", caller)
		}
		if err != nil {
			return fail(1, "%v", err)
		}
		fmt.Fprintf(stdout, "caller %s: webhook endpoint %s (active)\n", caller, url)
		if need := workerAllowances(ctx, url); need != "" {
			fmt.Fprintf(stderr, "api webhook set: warning: this URL needs %s, which every worker must have too, or each delivery is refused\n", need)
		}
		if created {
			fmt.Fprintf(stdout, "caller %s: new signing secret (shown only now; keep it)\n", caller)
			fmt.Fprintln(stdout, printed)
		}
	case "rotate":
		caller := args[1]
		printed, stored, err := newSecret(cfg, caller)
		if err != nil {
			return fail(1, "%v", err)
		}
		err = postgres.RotateWebhookSecret(ctx, pool, caller, stored, cfg.WebhookRotationOverlap)
		if errors.Is(err, postgres.ErrNoWebhook) {
			return fail(2, "caller %q has no webhook endpoint", caller)
		}
		if err != nil {
			return fail(1, "%v", err)
		}
		fmt.Fprintf(stdout, "caller %s: new signing secret; the previous ones sign too for %s (shown only now; keep it)\n", caller, cfg.WebhookRotationOverlap)
		fmt.Fprintln(stdout, printed)
	case "delete":
		caller := args[1]
		dropped, err := postgres.DeleteWebhook(ctx, pool, caller)
		if errors.Is(err, postgres.ErrNoWebhook) {
			return fail(2, "caller %q has no webhook endpoint", caller)
		}
		if err != nil {
			return fail(1, "%v", err)
		}
		fmt.Fprintf(stdout, "caller %s: webhook endpoint deleted; %d undelivered events dropped\n", caller, dropped)
	case "list":
		hooks, err := postgres.ListWebhooks(ctx, pool)
		if err != nil {
			return fail(1, "%v", err)
		}
		fmt.Fprintln(stdout, "CALLER\tURL\tSTATE\tFAILED_IN_ROW\tWHY_DISABLED")
		for _, h := range hooks {
			why := h.DisabledReason
			if h.LastError != "" {
				why += ": " + h.LastError
			}
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%d\t%s\n", h.CallerID, h.URL, h.State, h.FailuresInRow, oneLine(why))
		}
	case "reseal":
		return reseal(ctx, cfg.webhookSecretKey, pool, batch, stdout, fail)
	}
	return 0
}

// reseal seals every stored secret with the current key: those raw, and
// those sealed with the previous key. One that opens with neither is left
// as it is and named; the others are still re-sealed, and the exit status is
// 1. Running it again changes nothing.
func reseal(ctx context.Context, key webhook.SecretKey, pool *pgxpool.Pool, batch int, stdout io.Writer, fail func(int, string, ...any) int) int {
	current := 0
	var stuck []string
	rewritten, err := postgres.ResealWebhookSecrets(ctx, pool, batch, func(s postgres.StoredSecret) (postgres.Secret, bool, error) {
		v, changed, err := key.Reseal(s.CallerID, s.Value, s.Sealed)
		switch {
		case err != nil:
			stuck = append(stuck, fmt.Sprintf("%s (secret %d)", s.CallerID, s.ID))
			return postgres.Secret{}, false, nil
		case !changed:
			current++
		}
		return postgres.Secret{Value: v, Sealed: true}, changed, nil
	})
	if err != nil {
		return fail(1, "reseal: %v (%d secrets re-sealed before; run it again)", err, rewritten)
	}
	fmt.Fprintf(stdout, "webhook secrets: %d re-sealed with WEBHOOK_SECRET_KEY, %d already were\n", rewritten, current)
	if len(stuck) > 0 {
		return fail(1, "left as they are, secrets that open with neither WEBHOOK_SECRET_KEY nor WEBHOOK_SECRET_KEY_OLD: %s (delete and set those endpoints anew)", strings.Join(stuck, ", "))
	}
	return 0
}

// newSecret makes a signing secret for caller and returns it as printed once
// to the operator and as stored: sealed with WEBHOOK_SECRET_KEY, or raw with
// WEBHOOK_ALLOW_UNSEALED and no key.
func newSecret(cfg Config, caller string) (printed string, stored postgres.Secret, err error) {
	printed, secret, err := webhook.NewSecret()
	if err != nil {
		return "", postgres.Secret{}, err
	}
	v, sealed, err := cfg.webhookSecretKey.Seal(caller, secret)
	return printed, postgres.Secret{Value: v, Sealed: sealed}, err
}

// workerAllowances names the allowances a checked URL needed
// (WEBHOOK_ALLOW_INSECURE=true, WEBHOOK_ALLOW_PRIVATE=true), which the
// workers check again at every delivery; "" when it needs none.
func workerAllowances(ctx context.Context, url string) string {
	var need []string
	if strings.HasPrefix(url, "http://") {
		need = append(need, "WEBHOOK_ALLOW_INSECURE=true")
	}
	if _, err := webhook.CheckURL(ctx, url, webhook.Policy{AllowInsecure: true, Resolver: resolver}); err != nil {
		need = append(need, "WEBHOOK_ALLOW_PRIVATE=true")
	}
	return strings.Join(need, " and ")
}

// oneLine keeps a stored error on one line of the listing.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func (c *Config) webhookPolicy() webhook.Policy {
	return webhook.Policy{AllowInsecure: c.WebhookAllowInsecure, AllowPrivate: c.WebhookAllowPrivate, Resolver: resolver}
}
