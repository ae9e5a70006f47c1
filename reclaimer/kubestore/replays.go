package kubestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FirstSight records a Slack signature in the replay ConfigMap until it
// expires and says whether it is new; expired ones are dropped in the
// same update. The ConfigMap's resourceVersion makes two presses at once
// (or two replicas) race safely: the loser reads again.
func (s *Store) FirstSight(key string, now, expires time.Time) (bool, error) {
	sum := sha256.Sum256([]byte(key))
	k := hex.EncodeToString(sum[:])
	for range 5 {
		if err := s.fence(); err != nil {
			return false, err
		}
		ctx, cancel := s.ctx()
		first, err := s.firstSight(ctx, k, now, expires)
		cancel()
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue
		}
		return first, err
	}
	return false, errors.New("the replay ConfigMap kept changing under this replica")
}

func (s *Store) firstSight(ctx context.Context, k string, now, expires time.Time) (bool, error) {
	cms := s.cm.CoreV1().ConfigMaps(s.ns)
	cm, err := cms.Get(ctx, s.replayMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.replayMap, Namespace: s.ns}}
		_, err = cms.Create(ctx, withSight(cm, k, now, expires), metav1.CreateOptions{})
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	if v, ok := cm.Data[k]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(now) {
			return false, nil
		}
	}
	_, err = cms.Update(ctx, withSight(cm, k, now, expires), metav1.UpdateOptions{})
	return err == nil, err
}

func withSight(cm *corev1.ConfigMap, k string, now, expires time.Time) *corev1.ConfigMap {
	data := map[string]string{}
	for key, v := range cm.Data {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(now) {
			data[key] = v
		}
	}
	data[k] = expires.UTC().Format(time.RFC3339Nano)
	cm.Data = data
	return cm
}
