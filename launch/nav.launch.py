"""`ros2 launch mnemo_mpc nav.launch.py [params_file:=...] [use_sim_time:=true] [namespace:=...]`: the local planner.

`use_sim:=true` adds the PyBullet simulator node (`sim_node`: /clock, odom, local grid, scan, the world's goal and
global path) and puts both nodes on simulated time, so the stack runs with no robot:

    ros2 launch mnemo_mpc nav.launch.py use_sim:=true world_seed:=45
    ros2 launch mnemo_mpc nav.launch.py use_sim:=true map_yaml:=worlds/open_45.yaml \\
        start:="7.325,4.575,-1.946" goal:="2.425,4.925,-1.680"
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    default_params = os.path.join(get_package_share_directory("mnemo_mpc"), "config", "nav.yaml")
    use_sim_time = LaunchConfiguration("use_sim_time")
    sim_args = [
        ("world_seed", "7", int, "generated world seed (the world `mnemo-mpc demo --seed` drives)"),
        ("world_kind", "", str, "generated world kind; empty: drawn from the seed"),
        ("map_yaml", "", str, "map_server map instead of a generated world (or relative to share/mnemo_mpc/sim)"),
        ("start", "", str, "x,y,yaw of the robot in a map_yaml world"),
        ("goal", "", str, "x,y,yaw of the goal in a map_yaml world"),
        ("real_time_factor", "1.0", float, "simulated seconds per wall-clock second"),
    ]
    return LaunchDescription(
        [
            DeclareLaunchArgument("params_file", default_value=default_params, description="node parameters (YAML)"),
            DeclareLaunchArgument("use_sim", default_value="false", description="also start the simulator node"),
            # Simulated time follows use_sim unless set explicitly.
            DeclareLaunchArgument(
                "use_sim_time", default_value=LaunchConfiguration("use_sim"), description="use /clock"
            ),
            DeclareLaunchArgument("namespace", default_value="", description="robot namespace"),
            *(
                DeclareLaunchArgument(name, default_value=default, description=text)
                for name, default, _, text in sim_args
            ),
            Node(
                package="mnemo_mpc",
                executable="nav_node",
                name="mnemo_mpc_nav",
                namespace=LaunchConfiguration("namespace"),
                output="screen",
                parameters=[LaunchConfiguration("params_file"), {"use_sim_time": use_sim_time}],
            ),
            Node(
                package="mnemo_mpc",
                executable="sim_node",
                name="mnemo_mpc_sim",
                namespace=LaunchConfiguration("namespace"),
                output="screen",
                condition=IfCondition(LaunchConfiguration("use_sim")),
                parameters=[
                    {
                        "use_sim_time": use_sim_time,
                        # One file drives both: the planner's params (footprint, limits, lidar range) size the
                        # simulated robot and its world.
                        "robot_params": LaunchConfiguration("params_file"),
                        **{
                            name: ParameterValue(LaunchConfiguration(name), value_type=kind)
                            for name, _, kind, _ in sim_args
                        },
                    }
                ],
            ),
        ]
    )
