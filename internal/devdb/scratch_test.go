package devdb

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A scratch name is its prefix and ten hex digits, a new one each time;
// DropScratch refuses any other name before it connects.
func TestScratchNameAndDropGuard(t *testing.T) {
	t.Parallel()
	a, b := ScratchName("labels_bench_"), ScratchName("labels_bench_")
	require.True(t, strings.HasPrefix(a, "labels_bench_"))
	require.Len(t, a, len("labels_bench_")+10)
	require.NotEqual(t, a, b)
	for _, tc := range []struct{ name, prefix string }{{"labels", "labels_bench_"}, {"labels_bench_x", ""}, {"labels_capacity_1", "labels_bench_"}} {
		err := DropScratch(context.Background(), "postgres://127.0.0.1:1/postgres", tc.name, tc.prefix)
		require.ErrorContains(t, err, "refusing to drop", "%+v", tc)
	}
}
