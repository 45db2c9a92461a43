//go:build !wasip1

package guest

// Outside WASM there is no host: logs and metrics are dropped. The package
// still builds so DoFns and coders can be tested and benchmarked natively.

func hostLog(int32, string)                                              {}
func hostCounter(int32, string, string, int64)                           {}
func hostDistribution(int32, string, string, int64, int64, int64, int64) {}
