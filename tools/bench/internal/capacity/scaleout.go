package capacity

// Phase 6: the seed's arithmetic at ten times its peak, with the measured
// costs.

import (
	"strings"
)

func scaleOut(rep *Report) ScaleOut {
	s := ScaleOut{PeakCreatesPerSec: 20_000, SeedBytesPerKey: 512}
	s.KeysPerDay = s.PeakCreatesPerSec * 86_400
	s.SeedKeyStoreBytes = s.KeysPerDay * s.SeedBytesPerKey
	size := func(t string) float64 {
		for _, x := range rep.Sizes {
			if x.Table == t {
				return x.BytesPerRow
			}
		}
		return 0
	}
	s.BytesPerKey = size("idempotency_keys")
	s.BytesPerKeyChurned = rep.Churned.BytesPerRow
	s.KeyStoreBytes = s.KeysPerDay * s.BytesPerKey
	s.KeyStoreBytesHigh = s.KeysPerDay * s.BytesPerKeyChurned
	s.TombstoneBytes = s.KeysPerDay * 30 * rep.Tombstones.BytesPerRow
	s.RiverJobBytes = s.KeysPerDay * size("river_job")
	s.IntentLabelPerDay = s.KeysPerDay * (size("label_intents") + size("labels"))
	perKey := func(p Purge) float64 {
		if p.WALPerKey > 0 {
			return p.WALPerKey
		}
		return p.WALRawPerKey
	}
	purgeWAL := 0.0
	if len(rep.Purges) > 0 {
		purgeWAL = perKey(rep.Purges[0])
	}
	s.WALPerLabel = rep.Pipeline.WALPerAccept + rep.Pipeline.WALPerLabel + purgeWAL + perKey(rep.TombstonePurge) + perKey(rep.RiverCleaner)
	noFPI := func(p Purge) float64 {
		if p.WALNoFPIPerKey > 0 {
			return p.WALNoFPIPerKey
		}
		return perKey(p)
	}
	purgeNoFPI := 0.0
	if len(rep.Purges) > 0 {
		purgeNoFPI = noFPI(rep.Purges[0])
	}
	s.WALPerLabelNoFPI = rep.Pipeline.WALPerAcceptNoFPI + rep.Pipeline.WALPerLabelNoFPI + purgeNoFPI + noFPI(rep.TombstonePurge) + noFPI(rep.RiverCleaner)
	s.WALBytesPerSecNoFPI = s.PeakCreatesPerSec * s.WALPerLabelNoFPI
	s.WALBytesPerSec = s.PeakCreatesPerSec * s.WALPerLabel
	s.WALBytesPerDay = s.WALBytesPerSec * 86_400
	s.CommitsPerLabel = rep.Pipeline.CommitsPerAccept + rep.Pipeline.CommitsPerLabel
	s.CommitsPerSec = s.PeakCreatesPerSec * s.CommitsPerLabel
	s.PurgeKeysPerSec = s.PeakCreatesPerSec
	for _, l := range rep.Loads {
		switch {
		case strings.HasPrefix(l.Name, "saturation"):
			s.MeasuredAccepts = l.PerSec
		case strings.HasPrefix(l.Name, "commit:") && strings.Contains(l.Name, "pg_notify"):
			s.CommitsNotify = l.PerSec
		case strings.HasPrefix(l.Name, "commit:"):
			s.CommitsNoNotify = l.PerSec
		}
	}
	s.MeasuredLabels = rep.Pipeline.LabelsPerSec
	if len(rep.Purges) > 0 {
		s.MeasuredPurge = rep.Purges[0].KeysPerSec
	}
	if s.MeasuredAccepts > 0 {
		s.ShardsByAccepts = s.PeakCreatesPerSec / s.MeasuredAccepts
	}
	if s.MeasuredLabels > 0 {
		s.ShardsByLabels = s.PeakCreatesPerSec / s.MeasuredLabels
	}
	return s
}
