# The installable package (docs/custom-ops.md): `cmake --install build --prefix P` puts
#   P/include            the public headers of every layer and of the kernel library
#   P/lib                the static libraries (position independent, so shared libraries
#                        such as an operator library can link them)
#   P/bin/neuron-opgen   the operator generator (when built)
#   P/lib/cmake/neuron   neuronConfig.cmake: find_package(neuron), neuron_add_op_library()
#   P/lib/pkgconfig      neuron.pc: pkg-config --cflags --libs neuron
# Included at the end of the top-level CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(NEURON_VERSION 0.1.0)
set(NEURON_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/neuron)

foreach(layer ${NEURON_LAYERS} kernels)
  set_target_properties(neuron_${layer} PROPERTIES EXPORT_NAME ${layer})
endforeach()
set(NEURON_INSTALL_TARGETS neuron_base neuron_dsl neuron_codegen neuron_runtime neuron_kernels
    neuron)
if(TARGET neuron-opgen)
  set_target_properties(neuron-opgen PROPERTIES EXPORT_NAME opgen INSTALL_RPATH_USE_LINK_PATH ON)
  list(APPEND NEURON_INSTALL_TARGETS neuron-opgen)
endif()
install(TARGETS ${NEURON_INSTALL_TARGETS} EXPORT neuronTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(dir ${NEURON_LAYER_INCLUDES} ${CMAKE_SOURCE_DIR}/kernels/include)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(EXPORT neuronTargets NAMESPACE neuron:: DESTINATION ${NEURON_CMAKE_DIR})

get_target_property(NEURON_LLVM_LOCATION LLVM LOCATION)  # the shared libLLVM
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/neuronConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/neuronConfig.cmake INSTALL_DESTINATION ${NEURON_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/neuronConfigVersion.cmake
  VERSION ${NEURON_VERSION} COMPATIBILITY SameMinorVersion)
configure_file(${CMAKE_SOURCE_DIR}/cmake/neuron.pc.in ${CMAKE_BINARY_DIR}/package/neuron.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/neuronConfig.cmake
              ${CMAKE_BINARY_DIR}/package/neuronConfigVersion.cmake
              ${CMAKE_SOURCE_DIR}/cmake/NeuronOpLibrary.cmake
              ${CMAKE_SOURCE_DIR}/tools/op_library_entry.cpp
        DESTINATION ${NEURON_CMAKE_DIR})
install(FILES ${CMAKE_BINARY_DIR}/package/neuron.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
