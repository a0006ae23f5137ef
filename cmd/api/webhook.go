package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

// webhookCmd runs `api webhook set|rotate|delete|list`. A secret is printed
// once, as the last line of stdout, and never logged: the only copy besides
// the database's is the operator's.
func webhookCmd(ctx context.Context, cfg Config, poolCfg *pgxpool.Config, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "api webhook: "+format+"\n", a...)
		return code
	}
	usage := "want: webhook set CALLER URL | webhook rotate CALLER | webhook delete CALLER | webhook list; see api --help"
	if len(args) == 0 {
		return fail(2, "%s", usage)
	}
	switch {
	case args[0] == "set" && len(args) == 3:
		if err := webhook.CheckURL(ctx, args[2], cfg.webhookPolicy()); err != nil {
			return fail(2, "%s", err)
		}
	case args[0] == "rotate" && len(args) == 2, args[0] == "delete" && len(args) == 2, args[0] == "list" && len(args) == 1:
	default:
		return fail(2, "%s", usage)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer pool.Close()
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
		for _, h := range hooks {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%d\n", h.CallerID, h.URL, h.State, h.FailuresInRow)
		}
	}
	return 0
}

// newSecret makes a signing secret for caller and returns it as printed once
// to the operator and as stored: sealed with WEBHOOK_SECRET_KEY when it is
// set, raw otherwise.
func newSecret(cfg Config, caller string) (printed string, stored postgres.Secret, err error) {
	printed, secret, err := webhook.NewSecret()
	if err != nil {
		return "", postgres.Secret{}, err
	}
	v, sealed, err := cfg.webhookSecretKey.Seal(caller, secret)
	return printed, postgres.Secret{Value: v, Sealed: sealed}, err
}

func (c *Config) webhookPolicy() webhook.Policy {
	return webhook.Policy{AllowInsecure: c.WebhookAllowInsecure, AllowPrivate: c.WebhookAllowPrivate}
}
