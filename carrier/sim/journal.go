package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// journal is the state file: JSON Lines, one record per purchase, appended
// before the purchase is answered. Appending keeps a purchase O(1) however many
// labels were sold; rewriting a snapshot after each one would not be.
type journal struct {
	f *os.File
}

// journalRecord is one line: a purchase, a void, or after a reset the
// sequence to go on from, so label ids are not reused across a reset and a
// restart.
type journalRecord struct {
	Purchase *Purchase    `json:"purchase,omitempty"`
	Void     *journalVoid `json:"void,omitempty"`
	NextSeq  int64        `json:"next_seq,omitempty"`
}

// journalVoid is a void: which label, when, under which key. It follows the
// purchase of its label in the file.
type journalVoid struct {
	CarrierLabelID string    `json:"carrier_label_id"`
	VoidedAt       time.Time `json:"voided_at"`
	Key            string    `json:"idempotency_key"`
}

// openJournal reads the purchases and voids in path, in the order they
// happened (creating the file if missing), and opens it for appending. A last
// line cut short by a crash is dropped.
func openJournal(path string) (j *journal, records []journalRecord, nextSeq int64, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("state file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()

	r := bufio.NewReader(f)
	var good int64 // bytes up to the end of the last whole line
	for lineNo := 1; ; lineNo++ {
		line, readErr := r.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, nil, 0, fmt.Errorf("state file %s: %w", path, readErr)
		}
		if errors.Is(readErr, io.EOF) {
			break // an unterminated last line is a write the crash cut off
		}
		good += int64(len(line))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec journalRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, nil, 0, fmt.Errorf("state file %s line %d: %w", path, lineNo, err)
		}
		if rec.NextSeq > nextSeq {
			nextSeq = rec.NextSeq
		}
		if p := rec.Purchase; p != nil {
			seq, err := parseSeq(p.CarrierLabelID)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("state file %s line %d: %w", path, lineNo, err)
			}
			p.seq = seq
		}
		if rec.Purchase != nil || rec.Void != nil {
			records = append(records, journalRecord{Purchase: rec.Purchase, Void: rec.Void})
		}
	}
	if err := f.Truncate(good); err != nil {
		return nil, nil, 0, fmt.Errorf("state file: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		return nil, nil, 0, fmt.Errorf("state file: %w", err)
	}
	return &journal{f: f}, records, nextSeq, nil
}

func parseSeq(labelID string) (int64, error) {
	n, ok := strings.CutPrefix(labelID, "CL-")
	seq, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || seq <= 0 {
		return 0, fmt.Errorf("label id %q is not CL-<n>", labelID)
	}
	return seq, nil
}

func (j *journal) write(rec journalRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	// One write per record, so a crash can only cut the last line.
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

func (j *journal) append(p Purchase) error {
	return j.write(journalRecord{Purchase: &p})
}

func (j *journal) appendVoid(v journalVoid) error {
	return j.write(journalRecord{Void: &v})
}

func (j *journal) reset(nextSeq int64) error {
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if _, err := j.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return j.write(journalRecord{NextSeq: nextSeq})
}

func (j *journal) close() error {
	return j.f.Close()
}
