// Package memory is a backend that keeps everything in process memory, with
// leases and pauses: schedulers in one process share it, which makes it the
// backend for tests and for a single process, and the simplest reading of the
// contract in package backend.
//
//	b := memory.New() // or memory.NewWithClock(clock) in a test with a clock of its own
//	s, err := scheduler.New(scheduler.Config{Backend: b})
//
// Its run store (Backend.Runs) applies package backend/machine and writes each
// attempt's record into the backend in the same step as the slot's state.
//
// Nothing survives the process, and other processes do not see it: a fleet of
// processes needs package jetstream or sqlbackend.
package memory
