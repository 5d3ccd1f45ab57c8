package domain

import "github.com/tetherhq/tether/provider"

// The provider contract is the public SDK, package provider; these aliases
// keep its names in this package, so that both spellings are one type.
type (
	// Provider creates and destroys the resources behind sandboxes.
	Provider = provider.Provider
	// CreateSpec is what a provider needs to create a sandbox.
	CreateSpec = provider.CreateSpec
	// Resource is what a provider holds for one sandbox.
	Resource = provider.Resource
	// ProviderInfo is a provider's self-description.
	ProviderInfo = provider.Info
	// ProviderImage is a root file system registered with a provider.
	ProviderImage = provider.Image
	// ExecRequest is a shell command to run inside a ready sandbox.
	ExecRequest = provider.ExecRequest
	// ExecResult is the outcome of an ExecRequest.
	ExecResult = provider.ExecResult
	// Execer is the optional capability of running commands.
	Execer = provider.Execer
	// StreamExecer is the optional capability of streaming a command's
	// output.
	StreamExecer = provider.StreamExecer
	// Files is the optional capability of reading and writing files.
	Files = provider.Files
	// Archives is the optional capability of moving folders as tar
	// archives.
	Archives = provider.Archives
	// Pauser is the optional capability of pausing and resuming.
	Pauser = provider.Pauser
	// Snapshotter is the optional capability of snapshotting workspaces.
	Snapshotter = provider.Snapshotter
	// MemorySnapshotter is the optional capability of snapshotting a
	// whole running machine.
	MemorySnapshotter = provider.MemorySnapshotter
	// SnapshotInfo is one snapshot a provider holds.
	SnapshotInfo = provider.SnapshotInfo
	// Watcher is the optional capability of noticing lost resources at
	// once.
	Watcher = provider.Watcher
	// PortDialer is the optional capability of connecting to a port
	// inside a sandbox.
	PortDialer = provider.PortDialer
	// Processes is the optional capability of background processes.
	Processes = provider.Processes
	// PTY is the optional capability of terminals for processes.
	PTY = provider.PTY
	// FileWatcher is the optional capability of watching folders.
	FileWatcher = provider.FileWatcher
	// ProcessSpec is a process to start.
	ProcessSpec = provider.ProcessSpec
	// ProcessInfo is a process a provider keeps.
	ProcessInfo = provider.ProcessInfo
	// ProcessExit is how a process ended.
	ProcessExit = provider.ProcessExit
	// ProcessSelector names one process of a sandbox.
	ProcessSelector = provider.ProcessSelector
	// PTYSize is a terminal's size in characters.
	PTYSize = provider.PTYSize
	// ProcessEvent is one event of an attach to a process.
	ProcessEvent = provider.ProcessEvent
	// FileEvent is one change in a watched folder.
	FileEvent = provider.FileEvent
	// AttachFrom is where an attach starts.
	AttachFrom = provider.AttachFrom
	// ProcessEventKind is what an attach's event says.
	ProcessEventKind = provider.ProcessEventKind
)

// Where an attach starts, and what its events and a watch's say.
const (
	AttachNow        = provider.AttachNow
	AttachStart      = provider.AttachStart
	ProcessStart     = provider.ProcessStart
	ProcessStdout    = provider.ProcessStdout
	ProcessStderr    = provider.ProcessStderr
	ProcessPTYOutput = provider.ProcessPTYOutput
	ProcessDropped   = provider.ProcessDropped
	ProcessEnd       = provider.ProcessEnd
	FileWatchStart   = provider.FileWatchStart
)

// CanRunProcesses reports whether p runs background processes.
func CanRunProcesses(p Provider) bool {
	_, ok := p.(Processes)
	return ok
}

// CanPTY reports whether p gives processes terminals.
func CanPTY(p Provider) bool {
	_, ok := p.(PTY)
	return ok
}

// CanWatchFiles reports whether p watches folders.
func CanWatchFiles(p Provider) bool {
	_, ok := p.(FileWatcher)
	return ok
}

// CanDialPorts reports whether p connects to ports inside sandboxes.
func CanDialPorts(p Provider) bool {
	_, ok := p.(PortDialer)
	return ok
}

// CanPause reports whether p pauses and resumes sandboxes.
func CanPause(p Provider) bool {
	_, ok := p.(Pauser)
	return ok
}

// CanSnapshot reports whether p snapshots workspaces.
func CanSnapshot(p Provider) bool {
	_, ok := p.(Snapshotter)
	return ok
}

// CanSnapshotMemory reports whether p takes memory snapshots.
func CanSnapshotMemory(p Provider) bool {
	_, ok := p.(MemorySnapshotter)
	return ok
}

// Output streams of a command.
const (
	Stdout = provider.Stdout
	Stderr = provider.Stderr
)

// IsHostBound reports whether p is a host-bound provider.
func IsHostBound(p Provider) bool { return provider.IsHostBound(p) }
