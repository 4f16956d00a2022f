package natsutil

import (
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxReplicas is the most replicas JetStream allows a stream.
const MaxReplicas = 5

// CheckReplicas accepts the replica counts JetStream allows: 1 to MaxReplicas.
func CheckReplicas(n int) error {
	if n < 1 || n > MaxReplicas {
		return fmt.Errorf("replicas are 1 to %d", MaxReplicas)
	}
	return nil
}

// CheckStorage accepts file and memory storage.
func CheckStorage(st jetstream.StorageType) error {
	if st != jetstream.FileStorage && st != jetstream.MemoryStorage {
		return fmt.Errorf("storage is file or memory")
	}
	return nil
}
