package podmeta_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/podmeta"
)

// A UID the list does not know asks for a new list (a pod that started
// since), long before the interval; a failed list keeps the pods it had.
func TestListedListsAgainForAnUnknownUID(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	l := podmeta.NewListed(func(context.Context) ([]podmeta.Pod, error) {
		n := calls.Add(1)
		if fail.Load() {
			return nil, errors.New("apiserver down")
		}
		pods := []podmeta.Pod{{Namespace: "ml", Name: "a", UID: "uid-a"}}
		if n > 1 {
			pods = append(pods, podmeta.Pod{Namespace: "ml", Name: "b", UID: "uid-b"})
		}
		return pods, nil
	}, time.Hour, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go l.Run(ctx, slog.New(slog.DiscardHandler))
	require.Eventually(t, func() bool { _, ok := l.PodByUID("uid-a"); return ok }, 10*time.Second, time.Millisecond)
	require.NoError(t, l.Err())
	require.Eventually(t, func() bool { p, ok := l.PodByUID("uid-b"); return ok && p.Name == "b" }, 10*time.Second, time.Millisecond,
		"asking for an unknown UID lists again")

	fail.Store(true)
	before := calls.Load()
	require.Eventually(t, func() bool { l.PodByUID("uid-c"); return calls.Load() > before && l.Err() != nil }, 10*time.Second, time.Millisecond)
	_, ok := l.PodByUID("uid-a")
	require.True(t, ok, "a failed list keeps the pods listed before")
}

func TestListedKnowsNothingBeforeItsFirstList(t *testing.T) {
	l := podmeta.NewListed(func(context.Context) ([]podmeta.Pod, error) { return nil, nil }, time.Hour, time.Second)
	_, ok := l.PodByUID("uid-a")
	require.False(t, ok)
	require.Error(t, l.Err(), "not listed yet: the pods step fails")
}
