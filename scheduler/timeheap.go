package scheduler

import "time"

// timed is an element of a timeHeap: it says when it is due and keeps its
// index in the heap (-1 once out of it), for heap.Fix and heap.Remove.
type timed interface {
	dueAt() time.Time
	setIndex(int)
}

// timeHeap is a container/heap of timed elements, soonest first.
type timeHeap[T timed] []T

func (h timeHeap[T]) Len() int           { return len(h) }
func (h timeHeap[T]) Less(a, b int) bool { return h[a].dueAt().Before(h[b].dueAt()) }
func (h timeHeap[T]) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].setIndex(a)
	h[b].setIndex(b)
}

func (h *timeHeap[T]) Push(x any) {
	e := x.(T)
	e.setIndex(len(*h))
	*h = append(*h, e)
}

func (h *timeHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	e.setIndex(-1)
	return e
}
