package fleet

// Version is this library's version, sent by every replica as the micro service's
// version and in its jobs reply, so that a mixed fleet (a rolling upgrade) shows.
const Version = "0.1.0"

// ServiceName is the NATS micro service name every replica registers, found with
// `nats micro ls` and on the $SRV.PING|INFO|STATS.anarchon subjects.
const ServiceName = "anarchon"

// DefaultPrefix is the first subject token of every endpoint unless WithPrefix
// says otherwise.
const DefaultPrefix = "anarchon"
