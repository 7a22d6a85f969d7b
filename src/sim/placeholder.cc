// Placeholder until the module's sources land.
namespace tessera::sim {
int ModulePlaceholder() { return 0; }
}  // namespace tessera::sim
