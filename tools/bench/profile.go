package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// profileConcurrency is where the bar puts the accept's latency.
const profileConcurrency = 32

// profile takes a CPU profile of the API (apiprof: the same handler, in a
// process of its own) under the accept load, and splits it into categories.
func (h *harness) profile(ctx context.Context) error {
	p := &Profile{Concurrency: profileConcurrency}
	h.res.Profile = p
	fail := func(err error) error {
		p.Error = err.Error()
		return err
	}
	if err := h.reset(ctx); err != nil {
		return fail(err)
	}
	proc, addr, err := h.start(ctx, "apiprof", "apiprof", "listening", "API_ADDR=127.0.0.1:0", "PPROF_ADDR=127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	defer func() { _ = stop(proc) }()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	pprofAddr, err := proc.WaitListening(wctx, "pprof listening")
	cancel()
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(h.cfg.Out, 0o755); err != nil {
		return fail(err)
	}
	p.File = h.res.Date + "-api-cpu.pprof"
	path := filepath.Join(h.cfg.Out, p.File)
	secs := max(1, int(h.cfg.Duration.Seconds()))

	saved := h.cpu.api
	h.cpu.api = proc.Pid()
	defer func() { h.cpu.api = saved }()
	profErr := make(chan error, 1)
	load, cpu, db := h.measured(ctx, h.cfg.Warmup, func() LoadRun {
		go func() {
			// Starts with the measured window (after the warm-up).
			select {
			case <-time.After(h.cfg.Warmup):
			case <-ctx.Done():
			}
			profErr <- fetchProfile(ctx, "http://"+pprofAddr+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), path)
		}()
		return runLoad(ctx, loadSpec{
			Name: "accept (apiprof)", BaseURL: "http://" + addr, Token: h.token, Concurrency: profileConcurrency,
			Warmup: h.cfg.Warmup, Duration: h.cfg.Duration, RepeatShare: h.cfg.RepeatShare, NextOrder: &h.orders,
		})
	})
	load.CPU, load.DB = cpu, db
	p.Load, p.PerSec, p.Seconds = load, load.PerSec, float64(secs)
	if err := <-profErr; err != nil {
		return fail(err)
	}
	if err := analyze(ctx, path, p); err != nil {
		return fail(err)
	}
	if load.Requests > 0 && load.Seconds > 0 {
		// The profile covers secs of the load's window.
		p.MicrosPerRequest = round1(p.CPUSeconds / (load.PerSec * float64(secs)) * 1e6)
	}
	h.logf("  apiprof c=%d: %.0f req/s, %.2f cores, %.0f µs CPU per request; %s", profileConcurrency, load.PerSec, p.CoresUsed, p.MicrosPerRequest, sharesLine(p.Categories, 5))
	return nil
}

func fetchProfile(ctx context.Context, u, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// categories split samples walking each stack from the leaf up: the first
// that matches a frame takes the sample.
var categories = []struct {
	name string
	re   *regexp.Regexp
}{
	{"allocation and GC", regexp.MustCompile(`^runtime\.(mallocgc|gcBgMarkWorker|gcDrain|scanobject|gcAssist|markroot|bgsweep|sweepone|newobject|makeslice|growslice|mapassign|concatstring|rawstring|slicebytetostring)`)},
	{"syscalls (network reads and writes)", regexp.MustCompile(`^(syscall\.|internal/runtime/syscall\.|internal/poll\.|runtime\.(netpoll|epoll))`)},
	{"scheduler", regexp.MustCompile(`^runtime\.(schedule|findRunnable|mcall|park_m|futex|notesleep|stopm|startm|wakep|usleep|nanotime|ready|goready|lock|unlock)`)},
	{"SHA-256 (fingerprint, token)", regexp.MustCompile(`^crypto/`)},
	{"encoding/json", regexp.MustCompile(`^encoding/json\.`)},
	{"logging (zerolog)", regexp.MustCompile(`^github\.com/rs/zerolog`)},
	{"metrics (prometheus)", regexp.MustCompile(`^github\.com/prometheus/`)},
	{"pgx (protocol, pool)", regexp.MustCompile(`^github\.com/jackc/`)},
	{"net/http (server, client parsing)", regexp.MustCompile(`^(net/http|net/textproto|net/url|bufio|mime)`)},
	{"labels code (validation, canonical form, handler)", regexp.MustCompile(`^github\.com/labelkit/labels`)},
	{"ULID, UUID, time, strings", regexp.MustCompile(`^(github\.com/oklog/ulid|github\.com/google/uuid|time\.|strings\.|strconv\.|unicode|fmt\.|regexp)`)},
}

// inclusive are shares of samples with a match anywhere on the stack.
var inclusive = []struct {
	name string
	re   *regexp.Regexp
}{
	{"pgx, with its syscalls", regexp.MustCompile(`^github\.com/jackc/`)},
	{"the accept (httpapi.(*Server).accept)", regexp.MustCompile(`^github\.com/labelkit/labels/httpapi\.\(\*Server\)\.accept$`)},
	{"request body: parse and validate", regexp.MustCompile(`^github\.com/labelkit/labels/httpapi\.parseParcel`)},
	{"canonical form + fingerprint", regexp.MustCompile(`^github\.com/labelkit/labels/idempotency\.(Canonical|Fingerprint)`)},
	{"the request log line (zerolog)", regexp.MustCompile(`^github\.com/rs/zerolog`)},
	{"metrics", regexp.MustCompile(`^github\.com/prometheus/`)},
	{"GC (background marking)", regexp.MustCompile(`^runtime\.gcBgMarkWorker$`)},
	{"net/http outside the handler", regexp.MustCompile(`^net/http\.\(\*conn\)\.(readRequest|finalizeResponse)|^net/http\.\(\*response\)\.finishRequest|^net/http\.\(\*conn\)\.close|^bufio\.`)},
}

// analyze reads the profile with go tool pprof -raw and -top.
func analyze(ctx context.Context, path string, p *Profile) error {
	raw, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-raw", path).Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -raw: %w", err)
	}
	samples, dur, err := parseRaw(raw)
	if err != nil {
		return err
	}
	var total float64
	cat := map[string]float64{}
	inc := map[string]float64{}
	for _, s := range samples {
		total += s.value
		name := "other (runtime and the rest)"
	leaf:
		for _, fn := range s.stack {
			for _, c := range categories {
				if c.re.MatchString(fn) {
					name = c.name
					break leaf
				}
			}
		}
		cat[name] += s.value
		for _, c := range inclusive {
			if slices.ContainsFunc(s.stack, c.re.MatchString) {
				inc[c.name] += s.value
			}
		}
	}
	if total == 0 {
		return fmt.Errorf("the profile has no samples")
	}
	p.CPUSeconds = round2(total / 1e9)
	if dur > 0 {
		p.CoresUsed = round2(total / float64(dur))
	}
	toShares := func(m map[string]float64) []Share {
		var out []Share
		for k, v := range m {
			out = append(out, Share{Name: k, Share: round3(v / total)})
		}
		sortShares(out)
		return out
	}
	p.Categories, p.Inclusive = toShares(cat), toShares(inc)
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -top: %w", err)
	}
	for _, line := range strings.Split(string(top), "\n") {
		if strings.TrimSpace(line) != "" {
			p.Top = append(p.Top, strings.TrimRight(line, " "))
		}
	}
	return nil
}

type rawSample struct {
	value float64 // nanoseconds of CPU
	stack []string
}

// parseRaw reads `go tool pprof -raw`: the samples (count, nanoseconds,
// location ids, leaf first), the duration, and the locations' functions
// (inlined functions first).
func parseRaw(raw []byte) ([]rawSample, time.Duration, error) {
	type sampleIDs struct {
		value float64
		ids   []string
	}
	var (
		section string
		ids     []sampleIDs
		locs    = map[string][]string{}
		lastLoc string
		dur     time.Duration
	)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Duration:"):
			// "Duration: 3.00" (seconds), or a Go duration.
			if f := strings.Fields(line); len(f) > 1 {
				if d, err := time.ParseDuration(f[1]); err == nil {
					dur = d
				} else if s, err := strconv.ParseFloat(f[1], 64); err == nil {
					dur = time.Duration(s * float64(time.Second))
				}
			}
			continue
		case line == "Samples:":
			section = "samples"
			continue
		case line == "Locations":
			section = "locations"
			continue
		case line == "Mappings":
			section = "mappings"
			continue
		}
		switch section {
		case "samples":
			before, after, ok := strings.Cut(trim, ":")
			if !ok {
				continue // the header line
			}
			f := strings.Fields(before)
			if len(f) < 2 {
				continue
			}
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				continue
			}
			ids = append(ids, sampleIDs{value: v, ids: strings.Fields(after)})
		case "locations":
			// "    12: 0x4a5b3c M=1 runtime.futex /path/file.go:557 s=0" or a
			// continuation "             runtime.inlined /path:1 s=0".
			if id, rest, ok := strings.Cut(trim, ": "); ok && !strings.Contains(id, " ") {
				lastLoc = id
				f := strings.Fields(rest)
				if len(f) >= 3 {
					locs[id] = append(locs[id], f[2])
				}
				continue
			}
			if f := strings.Fields(trim); len(f) >= 1 && lastLoc != "" {
				locs[lastLoc] = append(locs[lastLoc], f[0])
			}
		}
	}
	if len(ids) == 0 {
		return nil, 0, fmt.Errorf("go tool pprof -raw: no samples")
	}
	out := make([]rawSample, 0, len(ids))
	for _, s := range ids {
		var stack []string
		for _, id := range s.ids {
			stack = append(stack, locs[id]...)
		}
		out = append(out, rawSample{value: s.value, stack: stack})
	}
	return out, dur, nil
}

func sharesLine(s []Share, n int) string {
	var parts []string
	for i, x := range s {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", x.Name, x.Share*100))
	}
	return strings.Join(parts, ", ")
}
