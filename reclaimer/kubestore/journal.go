package kubestore

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// The journal: a notification answered before its reclaims were all
// written is kept in ConfigMaps labelled JournalLabel (its entry): the
// notification gzipped in binaryData, cut into parts of maxJournalBytes
// (the apiserver takes objects up to about 1.5 MB).
const (
	JournalLabel    = "gpureclaim.io/journal"
	journalKey      = "alerts.json.gz"
	maxJournalBytes = 900 << 10
)

// Journal records a notification in one ConfigMap, or several when it
// does not fit in one, and returns the entry's name.
func (s *Store) Journal(notification []byte) (string, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(notification); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	id := fmt.Sprintf("gpureclaim-journal-%d", time.Now().UnixNano())
	ctx, cancel := s.ctx()
	defer cancel()
	for i, part := range slices.Collect(slices.Chunk(buf.Bytes(), maxJournalBytes)) {
		if err := s.fence(); err != nil {
			return "", err
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", id, i), Namespace: s.ns, Labels: map[string]string{JournalLabel: id}},
			BinaryData: map[string][]byte{journalKey: part},
		}
		if _, err := s.cm.CoreV1().ConfigMaps(s.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("writing journal entry %s: %w", cm.Name, err)
		}
	}
	return id, nil
}

// Replay returns the entries oldest first, each its parts put together.
func (s *Store) Replay() ([]reclaim.Journaled, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	list, err := s.cm.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{LabelSelector: JournalLabel})
	if err != nil {
		return nil, fmt.Errorf("listing the journal: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return journalOrder(list.Items[i].Name) < journalOrder(list.Items[j].Name) })
	var ids []string
	gzipped := map[string][]byte{}
	for _, cm := range list.Items {
		id := cm.Labels[JournalLabel]
		if _, ok := gzipped[id]; !ok {
			ids = append(ids, id)
		}
		gzipped[id] = append(gzipped[id], cm.BinaryData[journalKey]...)
	}
	out := make([]reclaim.Journaled, 0, len(ids))
	for _, id := range ids {
		n, err := unzipEntry(gzipped[id])
		if err != nil {
			return nil, fmt.Errorf("journal entry %s: %w", id, err)
		}
		out = append(out, reclaim.Journaled{ID: id, Notification: n})
	}
	return out, nil
}

// unzipEntry reads an entry's parts. Entries written before 2 December
// 2026 are arrays of alerts, one gzip stream a part; they are given back
// as one notification of their alerts.
func unzipEntry(gzipped []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gzipped))
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	if b = bytes.TrimSpace(b); !bytes.HasPrefix(b, []byte("[")) {
		return b, nil
	}
	var alerts []notification.Alert
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var part []notification.Alert
		if err := dec.Decode(&part); err != nil {
			return nil, err
		}
		alerts = append(alerts, part...)
	}
	return (&notification.Notification{Alerts: alerts, Version: "4"}).Body()
}

// journalOrder sorts entries by time and parts by number: names are
// gpureclaim-journal-<unix nanoseconds>-<part>.
func journalOrder(name string) string {
	rest := strings.TrimPrefix(name, "gpureclaim-journal-")
	at, part, _ := strings.Cut(rest, "-")
	return fmt.Sprintf("%020s-%09s", at, part)
}

// Retire deletes an entry's ConfigMaps.
func (s *Store) Retire(id string) error {
	if err := s.fence(); err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	return s.cm.CoreV1().ConfigMaps(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: JournalLabel + "=" + id})
}
