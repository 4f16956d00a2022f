package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/anarchon/anarchon/scheduler"
)

// jobsFile declares the jobs named in -jobs-file, one per line (blank lines and
// lines starting with # are skipped): read before Start, and again on SIGHUP,
// when the names added are registered on the running scheduler and the names
// gone removed from it. The other replicas follow their own file: a job runs on
// the replicas that declare it.
type jobsFile struct {
	path  string
	c     config
	log   *slog.Logger
	names []string // declared now
}

func (f *jobsFile) read() ([]string, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("-jobs-file: %w", err)
	}
	var names []string
	for line := range strings.Lines(string(data)) {
		name := strings.TrimSpace(line)
		if name != "" && !strings.HasPrefix(name, "#") && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// sync makes the jobs of the file the ones declared: at start (before Start),
// and on every reload. A name the scheduler refuses is logged and skipped on a
// reload (the replica runs on); at start it is an error.
func (f *jobsFile) sync(s *scheduler.Scheduler, atStart bool) error {
	names, err := f.read()
	if err != nil {
		return err
	}
	for _, name := range f.names {
		if slices.Contains(names, name) {
			continue
		}
		if err := s.RemoveJob(name); err != nil {
			f.log.Warn("jobs file: job not removed", "job", name, "err", err)
			continue
		}
		f.log.Info("jobs file: job removed", "job", name)
	}
	var declared []string
	for _, name := range names {
		if slices.Contains(f.names, name) {
			declared = append(declared, name)
			continue
		}
		err := s.Every(name, f.c.interval, func(ctx context.Context, run scheduler.Run) error {
			return work(ctx, f.c.interval/20)
		})
		if err != nil {
			if atStart {
				return err
			}
			f.log.Warn("jobs file: job not registered", "job", name, "err", err)
			continue
		}
		declared = append(declared, name)
		if !atStart {
			f.log.Info("jobs file: job registered", "job", name)
		}
	}
	f.names = declared
	f.log.Info("jobs file read", "path", f.path, "jobs", len(declared))
	return nil
}
