# neuron_add_op_library(<name> [NAMESPACE <ns>] HEADERS <header>...)
#
# Builds the kernels marked NEURON_OP(<ns>) in the headers into lib<name>.so, a library
# neuron.load_ops() loads (docs/custom-ops.md): neuron-opgen reads the headers with Clang and
# writes their registration and operator schemas; the library links the tracing layers of the
# toolkit (neuron::dsl) with their symbols hidden, and exports only the C entry points of
# op_library_entry.cpp. With NAMESPACE, an operator marked with another namespace is an error
# at its line. Part of the installed package (neuronConfig.cmake includes it).
function(neuron_add_op_library name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "NAMESPACE" "HEADERS")
  if(NOT ARG_HEADERS)
    message(FATAL_ERROR "neuron_add_op_library(${name}): no HEADERS given")
  endif()
  if(NOT TARGET neuron::opgen)
    message(FATAL_ERROR "neuron_add_op_library: this neuron package has no neuron-opgen "
                        "(it was built without libclang-cpp)")
  endif()
  set(headers)
  set(flags -I${NEURON_INCLUDE_DIR})
  foreach(h ${ARG_HEADERS})
    get_filename_component(abs ${h} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    get_filename_component(dir ${abs} DIRECTORY)
    list(APPEND headers ${abs})
    list(APPEND flags -I${dir})
  endforeach()
  get_target_property(fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  foreach(dir ${fmt_dirs})
    if(dir)
      list(APPEND flags -I${dir})
    endif()
  endforeach()
  set(ns_args)
  if(ARG_NAMESPACE)
    set(ns_args --namespace ${ARG_NAMESPACE})
  endif()
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${name}_ops.cpp)
  add_custom_command(
    OUTPUT ${out} ${out}.json
    COMMAND neuron::opgen ${headers} -o ${out} --schema ${out}.json --library ${ns_args}
            -- ${flags}
    DEPENDS ${headers} neuron::opgen
    COMMENT "neuron-opgen: operators of ${ARG_HEADERS}"
    VERBATIM)
  add_library(${name} MODULE ${out} ${NEURON_OP_LIBRARY_ENTRY})
  target_link_libraries(${name} PRIVATE neuron::dsl)
  target_compile_features(${name} PRIVATE cxx_std_20)
  # Only the entry points leave the library: its copy of the toolkit (and of the registry the
  # generated code fills) stays private, whatever else the process has loaded.
  set_target_properties(${name} PROPERTIES CXX_VISIBILITY_PRESET hidden
                                           VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${name} PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined)
endfunction()
