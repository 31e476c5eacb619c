# Included after project() of each interface package by `mnemo-mpc ros-interfaces build` (CMAKE_PROJECT_INCLUDE):
# the ROS 2 Jazzy wheels' exported `<pkg>__rosidl_generator_py` targets name the Python and NumPy include folders of
# the machine that built the wheels (/opt/python/cp311-cp311/...), which exist nowhere else, and CMake refuses to
# generate with a missing include folder. Those folders are only ever the wheel builder's; our own target gets this
# interpreter's from FindPython3. So, at the end of the directory (after every find_package), each imported
# target's missing include folders are dropped. With a ROS install the folders exist and nothing changes.
function(_mnemo_drop_missing_include_dirs)
  get_directory_property(_targets DIRECTORY "${CMAKE_SOURCE_DIR}" IMPORTED_TARGETS)
  foreach(_target IN LISTS _targets)
    get_target_property(_dirs ${_target} INTERFACE_INCLUDE_DIRECTORIES)
    if(_dirs)
      set(_kept)
      foreach(_dir IN LISTS _dirs)
        # Generator expressions are evaluated later; keep them as they are.
        if(EXISTS "${_dir}" OR _dir MATCHES "^\\$<")
          list(APPEND _kept "${_dir}")
        else()
          message(STATUS "mnemo_mpc: ${_target}: dropping the missing include folder ${_dir}")
        endif()
      endforeach()
      set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kept}")
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _mnemo_drop_missing_include_dirs)
