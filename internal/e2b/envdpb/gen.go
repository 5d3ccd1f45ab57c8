// Package envdpb holds the Go code generated from the .proto files of
// E2B's sandbox daemon protocol that Tether serves (process.Process and
// filesystem.Filesystem), with protoc and the Go protobuf and Connect
// generators pinned as Go tools in go.mod. `make docs` regenerates it;
// TestGeneratedCurrent fails when it is stale.
package envdpb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-connect-go=$(go tool -n protoc-gen-connect-go) -I . --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative process/process.proto filesystem/filesystem.proto"
