// Placeholder until the module's sources land.
namespace tessera::sched {
int ModulePlaceholder() { return 0; }
}  // namespace tessera::sched
