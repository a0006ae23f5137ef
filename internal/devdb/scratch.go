package devdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ScratchName is a name for a throwaway database, such as the bench and the
// demo run in: prefix followed by ten random hex digits.
func ScratchName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// DropScratch drops the throwaway database name, connected to serverURL (a
// maintenance database of the same server), with FORCE: its sessions are
// cut. It refuses a name that does not start with prefix, so that a mistake
// cannot drop anything but a scratch database.
func DropScratch(ctx context.Context, serverURL, name, prefix string) error {
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
