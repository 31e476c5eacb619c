"""`ros2 launch mnemo_mpc nav.launch.py [params_file:=...] [use_sim_time:=true]`: the mnemo_mpc local planner."""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description():
    default_params = os.path.join(get_package_share_directory("mnemo_mpc"), "config", "nav.yaml")
    return LaunchDescription(
        [
            DeclareLaunchArgument("params_file", default_value=default_params, description="node parameters (YAML)"),
            DeclareLaunchArgument("use_sim_time", default_value="false", description="use /clock"),
            DeclareLaunchArgument("namespace", default_value="", description="robot namespace"),
            Node(
                package="mnemo_mpc",
                executable="nav_node",
                name="mnemo_mpc_nav",
                namespace=LaunchConfiguration("namespace"),
                output="screen",
                parameters=[LaunchConfiguration("params_file"), {"use_sim_time": LaunchConfiguration("use_sim_time")}],
            ),
        ]
    )
