package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
)

// Bounds of a search: the jobs whose entries one search asks for, how many it
// asks at once, and the entries it lists per job whose IDs begin with the text.
const (
	maxSearchJobs    = 50
	searchInParallel = 8
	maxEntryMatches  = 10
)

// searchView is the search page: jobs whose names hold the text asked, and
// entries whose IDs begin with it.
type searchView struct {
	pageBase
	Job, Entry string
	Asked      bool
	Jobs       []fleet.JobSummary
	Entries    []entryMatch
	// Skipped counts the jobs an entry search did not ask (over maxSearchJobs);
	// Errors says which jobs did not answer.
	Skipped int
	Errors  []string
}

type entryMatch struct {
	Job, ID string
	Exact   bool
}

// searchPage finds jobs by name (the text anywhere in it, any case) and
// entries by ID (the ID itself, or IDs that begin with it) in the jobs found,
// or in every job when none is asked. One exact match is opened at once.
func (h *Handler) searchPage(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := searchView{pageBase: h.base(r, "search"), Job: strings.TrimSpace(q.Get("job")), Entry: q.Get("entry")}
	v.Asked = v.Job != "" || v.Entry != ""
	if len(v.Job) > maxText {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("job: %d bytes: a job's name is at most %d", len(v.Job), maxText))
		return
	}
	if v.Entry != "" {
		if err := backend.ValidateEntryID(v.Entry); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("entry=%q: no entry can have this ID: %v", v.Entry, err))
			return
		}
	}
	if !v.Asked {
		h.render(w, http.StatusOK, "search", v)
		return
	}
	f, err := h.cfg.Source.Jobs(ctx)
	if err != nil {
		h.failErr(w, r, "list the jobs", err)
		return
	}
	for _, j := range f.Jobs {
		if v.Job == "" || strings.Contains(strings.ToLower(j.Name), strings.ToLower(v.Job)) {
			v.Jobs = append(v.Jobs, j)
		}
	}
	// An exact name comes first.
	slices.SortStableFunc(v.Jobs, func(a, b fleet.JobSummary) int {
		switch {
		case a.Name == v.Job && b.Name != v.Job:
			return -1
		case b.Name == v.Job && a.Name != v.Job:
			return 1
		}
		return 0
	})
	if v.Entry == "" {
		if len(v.Jobs) == 1 && v.Jobs[0].Name == v.Job {
			http.Redirect(w, r, h.cfg.Prefix+jobPath(v.Job), http.StatusSeeOther)
			return
		}
		h.render(w, http.StatusOK, "search", v)
		return
	}
	jobs := v.Jobs
	if len(jobs) > maxSearchJobs {
		v.Skipped, jobs = len(jobs)-maxSearchJobs, jobs[:maxSearchJobs]
	}
	v.Entries, v.Errors = h.findEntries(ctx, jobs, v.Entry)
	if len(v.Entries) == 1 && v.Entries[0].Exact && len(v.Errors) == 0 && v.Skipped == 0 {
		http.Redirect(w, r, h.cfg.Prefix+entryPath(v.Entries[0].Job, v.Entries[0].ID), http.StatusSeeOther)
		return
	}
	h.render(w, http.StatusOK, "search", v)
}

// findEntries asks each job for the entry id and the entries whose IDs begin
// with it, a few jobs at a time. Jobs without entries (a backend that keeps
// none) are no error.
func (h *Handler) findEntries(ctx context.Context, jobs []fleet.JobSummary, id string) ([]entryMatch, []string) {
	var (
		mu      sync.Mutex
		matches []entryMatch
		errs    []string
		wg      sync.WaitGroup
		slots   = make(chan struct{}, searchInParallel)
	)
	for _, j := range jobs {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			var found []entryMatch
			_, err := h.cfg.Source.Entry(ctx, j.Name, fleet.EntryRequest{ID: id, History: 1})
			switch {
			case err == nil:
				found = append(found, entryMatch{Job: j.Name, ID: id, Exact: true})
			case errors.Is(err, fleet.ErrEntryNotFound):
			default:
				if !errors.Is(err, fleet.ErrNotSupported) {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("%s: %v", j.Name, err))
					mu.Unlock()
				}
				return
			}
			// IDs that begin with id sort right after it.
			list, err := h.cfg.Source.Entries(ctx, j.Name, fleet.EntriesRequest{After: id, Limit: maxEntryMatches})
			if err == nil {
				for _, e := range list.Entries {
					if strings.HasPrefix(e.ID, id) {
						found = append(found, entryMatch{Job: j.Name, ID: e.ID})
					}
				}
			}
			mu.Lock()
			matches = append(matches, found...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(matches, func(a, b entryMatch) int {
		if c := strings.Compare(a.Job, b.Job); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	slices.Sort(errs)
	return matches, errs
}
