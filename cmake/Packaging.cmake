# Install rules and the Debian package (CPack), included from the top CMakeLists.txt after the
# targets exist. `bash scripts/package.sh` builds build/tessera_<version>_<arch>.deb.
#
#   /usr/bin/tessera, /usr/bin/tessera-capgpu-region
#   /usr/lib/tessera/libtessera_capgpu.so              (${TESSERA_PRIVATE_LIBDIR}: preloaded, never linked)
#   /etc/tessera/tessera.yaml, /etc/tessera/agent.env  (conffiles; agent.env is root-only: it holds a token)
#   /usr/lib/systemd/system/tessera-serve.service, tessera-agent.service
#   /usr/share/doc/tessera/                            README, docs, Slurm/PBS example templates
#
# /etc is absolute on purpose: the package installs under /usr, its configuration is /etc/tessera.
set(TESSERA_PACKAGING_DIR ${CMAKE_SOURCE_DIR}/packaging)

install(TARGETS tessera tessera-capgpu-region RUNTIME DESTINATION bin)
install(TARGETS tessera_capgpu LIBRARY DESTINATION ${TESSERA_PRIVATE_LIBDIR})
install(FILES ${TESSERA_PACKAGING_DIR}/etc/tessera.yaml DESTINATION /etc/tessera
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${TESSERA_PACKAGING_DIR}/etc/agent.env DESTINATION /etc/tessera
  PERMISSIONS OWNER_READ OWNER_WRITE)
install(FILES ${TESSERA_PACKAGING_DIR}/systemd/tessera-serve.service
  ${TESSERA_PACKAGING_DIR}/systemd/tessera-agent.service DESTINATION lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION share/doc/tessera)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION share/doc/tessera/docs)
install(FILES ${CMAKE_SOURCE_DIR}/examples/slurm/job.sbatch ${CMAKE_SOURCE_DIR}/examples/slurm/job.pbs
  ${CMAKE_SOURCE_DIR}/examples/slurm/tessera.yaml DESTINATION share/doc/tessera/examples/slurm)

# dpkg marks nothing as a conffile unless the control archive lists it (debhelper would; CPack
# does not), and then keeps an administrator's edits across upgrades.
set(TESSERA_CONFFILES ${CMAKE_BINARY_DIR}/packaging/conffiles)
file(WRITE ${TESSERA_CONFFILES} "/etc/tessera/tessera.yaml\n/etc/tessera/agent.env\n")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tessera)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(TESSERA_PACKAGE_MAINTAINER "Tessera maintainers <maintainers@tessera.invalid>" CACHE STRING
  "Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${TESSERA_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "fractional GPU orchestration: control plane, node agent, memory-cap library")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # tessera_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# The extended description; CPack puts the summary above it as the synopsis and indents it.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "Tessera places whole GPUs, hardware partitions (NVIDIA MIG, AMD compute partitions) and
memory-capped shares with one engine. This package holds the tessera command, the
tessera-serve (control plane) and tessera-agent (node agent) systemd units, an example
configuration in /etc/tessera and libtessera_capgpu.so, the GPU memory-cap preload library.")
set(CPACK_STRIP_FILES ON)
# Library dependencies from the binaries themselves (dpkg-shlibdeps); adduser for the postinst.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  "${TESSERA_CONFFILES};${TESSERA_PACKAGING_DIR}/debian/postinst;${TESSERA_PACKAGING_DIR}/debian/prerm;${TESSERA_PACKAGING_DIR}/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Absolute destinations (/etc/tessera) are meant; no warning for them.
set(CPACK_WARN_ON_ABSOLUTE_INSTALL_DESTINATION OFF)
include(CPack)
