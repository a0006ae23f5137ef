// Package scratch makes the throwaway databases the bench and the demo run
// in: a random name under a prefix of their own, and a drop that refuses
// any database not under that prefix.
package scratch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Name returns prefix followed by ten random hex digits.
func Name(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Drop drops the database name, connected to serverURL (a maintenance
// database of the same server), with FORCE: its sessions are cut. It refuses
// a name that does not start with prefix, so that a mistake cannot drop
// anything but a scratch database.
func Drop(ctx context.Context, serverURL, name, prefix string) error {
	if prefix == "" || !strings.HasPrefix(name, prefix) {
		return fmt.Errorf("refusing to drop %q: not a %s database", name, prefix)
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
	return err
}
