package natsutil

// BucketPermissions are the subjects a client of a key-value bucket publishes to,
// under the JetStream API prefix api (APIPrefix: "$JS.API." by default), to create
// the bucket or find it, read it (direct gets, and the stream leader's), watch it
// (an ordered consumer: create, delete, flow control) and write keys matching
// keys (a pattern under $KV.<bucket>., ">" for all).
func BucketPermissions(api, bucket, keys string) []string {
	stream := "KV_" + bucket
	return []string{
		api + "STREAM.INFO." + stream,
		api + "STREAM.CREATE." + stream,
		api + "STREAM.UPDATE." + stream,
		api + "STREAM.MSG.GET." + stream,
		api + "DIRECT.GET." + stream,
		api + "DIRECT.GET." + stream + ".>",
		api + "CONSUMER.CREATE." + stream + ".>",
		api + "CONSUMER.DELETE." + stream + ".>",
		"$JS.FC." + stream + ".>",
		"$KV." + bucket + "." + keys,
	}
}
