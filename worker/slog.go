package worker

import (
	"context"
	"log/slog"
	"strings"

	"github.com/rs/zerolog"
)

// SlogHandler hands slog records (River's, the River UI's) to a zerolog
// logger, so that they come out as every other line of the process: the
// logger's own fields and `time`, the record's `level` and `message`, its
// attributes as fields (a group's named "group.key"; a duration's "key_ms",
// in milliseconds; an error named "err", River's name, as "error"). Records below min, or below the logger's level, are
// dropped.
type SlogHandler struct {
	log    zerolog.Logger
	min    slog.Level
	prefix string      // the open groups, "a.b."
	attrs  []slog.Attr // from WithAttrs, their keys prefixed
}

// NewSlogHandler returns a handler writing onto log the records at min and
// above.
func NewSlogHandler(log zerolog.Logger, min slog.Level) *SlogHandler {
	return &SlogHandler{log: log, min: min}
}

// Enabled reports whether a record at l is written.
func (h *SlogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.min && h.log.GetLevel() <= zerologLevel(l) && zerolog.GlobalLevel() <= zerologLevel(l)
}

// Handle writes r as one zerolog event.
func (h *SlogHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level < h.min {
		return nil
	}
	ev := h.log.WithLevel(zerologLevel(r.Level))
	if ev == nil {
		return nil
	}
	for _, a := range h.attrs {
		addAttr(ev, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(ev, h.prefix, a)
		return true
	})
	ev.Msg(r.Message)
	return nil
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *SlogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		c.attrs = append(c.attrs, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
	}
	return &c
}

// WithGroup returns a handler that names the attributes that follow
// "name.key".
func (h *SlogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix += name + "."
	return &c
}

// addAttr adds a to ev under prefix+key, a group's members each under
// prefix+group.key (an unnamed group's inline), as slog's handlers do.
func addAttr(ev *zerolog.Event, prefix string, a slog.Attr) {
	if a.Equal(slog.Attr{}) {
		return
	}
	v := a.Value.Resolve()
	key := prefix + a.Key
	if key == "err" { // River's name (for an error or its text) for what every other line calls error
		key = zerolog.ErrorFieldName
	}
	switch v.Kind() {
	case slog.KindGroup:
		if a.Key != "" {
			prefix = key + "."
		}
		for _, m := range v.Group() {
			addAttr(ev, prefix, m)
		}
		return
	case slog.KindString:
		ev.Str(key, v.String())
	case slog.KindInt64:
		ev.Int64(key, v.Int64())
	case slog.KindUint64:
		ev.Uint64(key, v.Uint64())
	case slog.KindFloat64:
		ev.Float64(key, v.Float64())
	case slog.KindBool:
		ev.Bool(key, v.Bool())
	case slog.KindDuration:
		// As every duration of the service's own lines: milliseconds, the
		// unit in the name.
		if !strings.HasSuffix(key, "_ms") {
			key += "_ms"
		}
		ev.Dur(key, v.Duration())
	case slog.KindTime:
		ev.Time(key, v.Time())
	default:
		if err, ok := v.Any().(error); ok {
			ev.AnErr(key, err)
		} else {
			ev.Interface(key, v.Any())
		}
	}
}

func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}

// riverLogLevel is the least level of River's records a process logs onto
// log: warn, or everything when log is at debug.
func riverLogLevel(log zerolog.Logger) slog.Level {
	if log.GetLevel() <= zerolog.DebugLevel {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// NewRiverLogger is the slog logger a River client (or the River UI) of a
// process is given: its records onto log, at riverLogLevel, as every other
// line of the process.
func NewRiverLogger(log zerolog.Logger) *slog.Logger {
	return slog.New(NewSlogHandler(log, riverLogLevel(log)))
}
