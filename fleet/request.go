package fleet

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// request is one request to an endpoint: a micro endpoint's (the fleet-wide ones)
// or a per-job subscription's.
type request interface {
	Subject() string
	Reply() string
	Data() []byte
	Header() nats.Header
	// Respond sends one reply message.
	Respond(data []byte) error
	// Error sends an error reply: the micro error headers and data.
	Error(code, description string, data []byte) error
}

// microRequest is a request to a micro endpoint.
type microRequest struct{ micro.Request }

func (r microRequest) Header() nats.Header       { return nats.Header(r.Headers()) }
func (r microRequest) Respond(data []byte) error { return r.Request.Respond(data) }

func (r microRequest) Error(code, description string, data []byte) error {
	return r.Request.Error(code, description, data)
}

// natsRequest is a request to a per-job endpoint: a message on its subscription.
type natsRequest struct{ m *nats.Msg }

func (r natsRequest) Subject() string     { return r.m.Subject }
func (r natsRequest) Reply() string       { return r.m.Reply }
func (r natsRequest) Data() []byte        { return r.m.Data }
func (r natsRequest) Header() nats.Header { return r.m.Header }

func (r natsRequest) Respond(data []byte) error { return r.m.Respond(data) }

func (r natsRequest) Error(code, description string, data []byte) error {
	return r.m.RespondMsg(&nats.Msg{Data: data, Header: nats.Header{
		micro.ErrorCodeHeader: {code}, micro.ErrorHeader: {description},
	}})
}

// handler answers one request.
type handler func(request)

// Per-job endpoints are plain queue subscriptions (micro's queue group), seven
// per job (a job's entry requests share one, routed by their last token),
// feeding two channels that a few workers serve: a micro endpoint costs a
// goroutine, its statistics and a drain at Stop each, which a replica of ten
// thousand jobs (seventy thousand endpoints) cannot afford. Reads (history,
// active, entries) and controls (trigger, pause, resume, entry changes) wait apart
// (an entry read arrives with the controls and is handed to the read workers), so that what a viewer may send
// cannot keep an operator's request from being answered. The fleet-wide endpoints
// and $SRV are the micro service's.
const (
	// readWorkers and controlWorkers serve the per-job endpoints' requests at
	// once; a trigger's run goes on in a goroutine of its own.
	readWorkers    = 16
	controlWorkers = 4
	// requestQueue is how many requests of one kind to per-job endpoints wait for
	// a worker before NATS drops more (a slow consumer).
	requestQueue = 4096
)

// subscribeJob subscribes h to one per-job endpoint's subject, its requests
// waiting in queue.
func (f *Service) subscribeJob(job, subject string, queue chan *nats.Msg, h handler) error {
	f.routesMu.Lock()
	defer f.routesMu.Unlock()
	sub, err := f.nc.ChanQueueSubscribe(subject, micro.DefaultQueueGroup, queue)
	if err != nil {
		return err
	}
	f.routes[subject] = h
	f.subs[job] = append(f.subs[job], sub)
	return nil
}

// work serves the requests of queue (routes) and of handoff (the entry reads
// handed off by the control workers, readRoutes; nil for none) until quit; then
// it answers the ones still queued (the service is stopping: 503) and returns.
func (f *Service) work(queue, handoff chan *nats.Msg) {
	defer f.workers.Done()
	for {
		select {
		case m := <-queue:
			f.route(m, f.routes)
		case m := <-handoff:
			f.route(m, f.readRoutes)
		case <-f.quit:
			for {
				select {
				case m := <-queue:
					f.route(m, f.routes)
				case m := <-handoff:
					f.route(m, f.readRoutes)
				default:
					return
				}
			}
		}
	}
}

// route hands m to the handler of the subscription it came on. A message's own
// subject may be another: JetStream delivers a stored message with the subject it
// was stored under.
func (f *Service) route(m *nats.Msg, routes map[string]handler) {
	if m.Sub == nil {
		return
	}
	f.routesMu.RLock()
	h := routes[m.Sub.Subject]
	f.routesMu.RUnlock()
	if h == nil {
		// A job unsubscribed while its request waited: another replica may
		// declare it.
		if req := (natsRequest{m}); !f.ignored(req) {
			f.fail(req, &replyError{code: CodeUnavailable, msg: "the job is no longer served by this replica: ask again"})
		}
		return
	}
	h(natsRequest{m})
}
