package promquery

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// HolderQuery is the query for the exporter's series that say the holder
// still holds the unit. Every value is a quoted string literal: a label
// value never leaves it.
func HolderQuery(uuid string, holder map[string]string) string {
	matchers := []string{names.LabelUUID + "=" + strconv.Quote(uuid)}
	for _, k := range []string{names.LabelNamespace, names.LabelPod, names.LabelUser, names.LabelSlurmJob} {
		if v := holder[k]; v != "" {
			matchers = append(matchers, k+"="+strconv.Quote(v))
		}
	}
	return names.UnitOwnerInfo + "{" + strings.Join(matchers, ",") + "}"
}

// Holds says whether Prometheus still sees the holder on the unit.
func (c *Client) Holds(ctx context.Context, uuid string, holder map[string]string) (bool, string, error) {
	q := HolderQuery(uuid, holder)
	held, err := c.Demand(ctx, q)
	if err != nil {
		return false, q, fmt.Errorf("asking Prometheus %s: %w", q, err)
	}
	return held, q, nil
}
