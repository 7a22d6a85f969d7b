// Placeholder until the module's sources land.
namespace tessera::partition {
int ModulePlaceholder() { return 0; }
}  // namespace tessera::partition
