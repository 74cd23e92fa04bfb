package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/tidwall/gjson"

	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store"
)

// Delivery statuses (hunt_delivery.status).
const (
	StatusPending    = store.DeliveryPending    // planned, not tried yet (or re-queued)
	StatusDelivering = store.DeliveryDelivering // an attempt under a live (hunt, sink) claim
	StatusRetry      = store.DeliveryRetry      // failed; tried again at next_attempt
	StatusDelivered  = store.DeliveryDelivered
	StatusDead       = store.DeliveryDead       // gave up: permanent failure or past the horizon
	StatusSuppressed = store.DeliverySuppressed // every finding of the fire was suppressed: nothing to send
	// StatusEnabled marks the row recording when a sink was first enabled (store.DeliveryEnabled).
	StatusEnabled = store.DeliveryEnabled
)

// deliveries is what a Dispatcher needs of hunt-runner's tables besides the claim protocol:
// the delivery records, the sinks' enablement, a fire's committed findings and the
// suppression keys. *store.Store implements it; every statement is one round trip.
type deliveries interface {
	EnableSinks(ctx context.Context, sinks []string, owner string) (map[string]time.Time, error)
	PendingDeliveries(ctx context.Context, want map[string][]store.Owed, since int64, limit int) ([]store.CommittedFire, time.Time, error)
	PlanDeliveries(ctx context.Context, p store.DeliveryPlan) error
	StartDeliveries(ctx context.Context, leases []lease.Lease, ids []store.DeliveryID) ([]store.Delivery, error)
	FinishDelivery(ctx context.Context, l lease.Lease, d store.Delivery, o store.DeliveryOutcome) error
	CountDeliveries(ctx context.Context, since int64) (store.DeliveryCounts, error)
	FireFindings(ctx context.Context, huntID string, fire int64, runID uuid.UUID) ([]store.FireFinding, error)
	SuppressedKeys(ctx context.Context, huntID string, fire int64, window time.Duration, keys []string) (map[string]bool, error)
	RecordSuppress(ctx context.Context, huntID string, fire int64, keys []string) error
	Snoozes(ctx context.Context) (map[string]store.Snooze, error)
}

// claimer is the claim protocol a Dispatcher claims each (hunt, sink) through, under
// store.DeliveryKey: *lease.Coordinator.
type claimer interface {
	Claim(ctx context.Context, fires []lease.Fire) (lease.Result, error)
	Renew(ctx context.Context, l lease.Lease) (lease.Lease, error)
	Release(ctx context.Context, l lease.Lease) error
}

// findingKey is a finding's key for suppression and grouping: its dedup key when the hunt sets
// dedup:, else its suppress.by fields.
func findingKey(f store.FireFinding, by []string) string {
	if f.DedupKey != "" {
		sum := sha256.Sum256([]byte("dedup\x00" + f.DedupKey))
		return hex.EncodeToString(sum[:16])
	}
	return suppressKey(f.JSON, by)
}

// suppressKey identifies a finding for suppression: its by fields (gjson paths) as JSON.
func suppressKey(findingJSON string, by []string) string {
	h := sha256.New()
	for _, field := range by {
		raw := gjson.Get(findingJSON, field).Raw
		b, _ := json.Marshal([2]string{field, raw})
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
