"""ROS-free navigation controller: grid + pose + goal -> checked velocity command."""
