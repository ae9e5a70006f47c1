package promquery

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// ActivityQueries are the two queries that say when a pod's GPUs were last
// active: the newest sample, over lookback, of any unit the pod held with
// activity above threshold (at resolution step), and whether it held a
// unit at all. The namespace and pod are quoted string literals: a value
// never leaves its literal.
func ActivityQueries(namespace, pod string, threshold float64, lookback, step time.Duration) (last, held string) {
	owner := fmt.Sprintf("%s{%s=%s,%s=%s}", names.UnitOwnerInfo, names.LabelNamespace, strconv.Quote(namespace), names.LabelPod, strconv.Quote(pod))
	last = fmt.Sprintf("max(max_over_time(timestamp((%s > %s) and on (%s) %s)[%s:%s]))",
		names.RecActivity, strconv.FormatFloat(threshold, 'g', -1, 64), names.LabelUUID, owner, promDuration(lookback), promDuration(step))
	held = fmt.Sprintf("max(max_over_time(%s[%s]))", owner, promDuration(lookback))
	return last, held
}

// promDuration writes a duration as PromQL does, in whole milliseconds.
func promDuration(d time.Duration) string { return fmt.Sprintf("%dms", max(1, d.Milliseconds())) }

// LastActive says when a pod's GPUs were last active within lookback
// (zero: not once) and whether the pod held a GPU in that time.
func (c *Client) LastActive(ctx context.Context, namespace, pod string, threshold float64, lookback, step time.Duration) (time.Time, bool, error) {
	lastQ, heldQ := ActivityQueries(namespace, pod, threshold, lookback, step)
	held, err := c.Demand(ctx, heldQ)
	if err != nil || !held {
		return time.Time{}, false, err
	}
	result, err := c.instant(ctx, lastQ)
	if err != nil || len(result) == 0 {
		return time.Time{}, true, err
	}
	ts, err := result[0].float()
	if err != nil {
		return time.Time{}, true, err
	}
	sec, frac := math.Modf(ts)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true, nil
}
