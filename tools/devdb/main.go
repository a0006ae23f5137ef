// Command devdb makes sure the project's PostgreSQL database is there, for the
// Taskfile, the demo and CI.
//
//	go -C tools run ./devdb url         ensure server + database "labels", print its URL
//	go -C tools run ./devdb stop        stop the private server under .pgdata if it runs
//
// When DATABASE_URL is set, url ensures that server and database instead of the default 127.0.0.1:5432 / labels. When no
// server answers, a private one is started under .pgdata at the module root
// (see internal/devdb). Progress lines go to stderr; only the URL goes to
// stdout. On error it prints one line to stderr and exits 2.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/labelkit/labels/internal/devdb"
)

const defaultDatabase = "labels"

const usage = `usage: devdb url | stop

  url         ensure the server and the database, print the database URL
  stop        stop the private server under .pgdata, if this project started one

DATABASE_URL, when set, names the server and database to ensure.
`

func main() {
	if len(os.Args) != 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var out string
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	switch os.Args[1] {
	case "url":
		out, err = databaseURL(ctx)
	case "stop":
		err = stop(ctx)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		err = fmt.Errorf("unknown command %q (want url or stop)", os.Args[1])
	}
	if err != nil {
		// One line: the first line of the error, the rest is in the server log.
		msg := strings.TrimSpace(err.Error())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = strings.TrimSpace(msg[:i]) + " (" + strings.Join(strings.Fields(msg[i+1:]), " ") + ")"
		}
		fmt.Fprintf(os.Stderr, "devdb: %s\n", msg)
		os.Exit(2)
	}
	if out != "" {
		fmt.Println(out)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func databaseURL(ctx context.Context) (string, error) {
	return devdb.EnsureURL(ctx, devdb.Options{URL: os.Getenv("DATABASE_URL"), Log: logf}, defaultDatabase)
}

func stop(ctx context.Context) error {
	dir, err := devdb.PrivateDir()
	if err != nil {
		return err
	}
	stopped, err := devdb.StopIfRunning(ctx, dir)
	switch {
	case err != nil:
		return err
	case stopped:
		logf("devdb: stopped the private server in %s", dir)
	default:
		logf("devdb: no private server runs in %s", dir)
	}
	return nil
}
