// Package processes is the API's background processes of a ready sandbox:
// their start, list, input, signals and output streams, their terminals
// over WebSocket, and file watches. The sandbox, the activity record of
// each call and the routing of a call to its sandbox's node are package
// dataplane's.
package processes
