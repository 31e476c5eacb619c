"""Test kinds: every test is exactly one of `unit`, `integration` or `ros` (pytest.ini), assigned here by module, so
that a test file need not carry its markers. `slow` is separate and stays on the test itself (`@pytest.mark.slow`).

How to classify a new test module (`tests/test_*.py`): add its name to exactly one of UNIT, INTEGRATION or ROS below.

- `unit`: in-process and quick (each well under half a second): a function, a class, a few solves or controller steps,
  a CLI call refused before any work. No PyBullet, no DDS, no process of the test's own, no dataset collection, no
  training run, no episode.  (Processes the package starts for itself, such as the compile cache's `cc --version`
  probe, do not count.)
- `integration`: PyBullet (a `Simulator`, `pybullet.connect`, `run_episode`, a CLI command that drives one), dataset
  collection (`collect`, a store fixture built by the collector), a training run (warm-start training, meta-training,
  an experiment study's `run_study` / `run_seed`, a model trained until it meets a bound), a process of the test's own
  (CLI subprocess, worker pool, multiprocessing, `pip install`, Ray), or an episode of the controller or the node core
  judged by its outcome without PyBullet (driven to a goal or to failure on the kinematic model; the node-core fuzz).
- `ros`: live rclpy / DDS (a node process talking over DDS) and colcon.

If a module mixes kinds, give the module the kind of most of its tests and name the others in EXCEPTIONS (by
function name: every parametrization follows). A unit test over ~0.45 s goes to integration through SLOW_IN_PROCESS
(the unit tier, `make test-fast`, has a one-minute budget). A marker written on a test or as a module's `pytestmark`
wins over all of these. `tests/test_markers.py` checks that every module is listed and that every collected test
ends up with exactly one kind, so an unlisted module fails `make test` and `make test-fast`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest

KINDS = ("unit", "integration", "ros")

UNIT = {
    "test_ros_follow_path",
    "test_ros_sim_launch",
    "test_cli_errors",
    "test_costmap",
    "test_dataset_store",
    "test_experiments_runner",
    "test_footprint",
    "test_footprint_integration",  # the planning half; its simulator / closed-loop / demo tests are in EXCEPTIONS
    "test_hostile_inputs_round2",
    "test_icl_core",
    "test_icl_issue12",
    "test_icl_learnable_lfom",
    "test_icl_moe",
    "test_identify",
    "test_layers",
    "test_markers",
    "test_memory_attention",
    "test_memory_features",
    "test_nav_actuation",
    "test_nav_controller",
    "test_nav_goal_checker",
    "test_nav_hold",
    "test_nav_maneuver",
    "test_nav_moving_obstacles",
    "test_nav_narrow_passage",
    "test_nav_prefetch",
    "test_nav_recovery",
    "test_nav_sparse_path",
    "test_nav_speed_regulation",
    "test_optimizers",
    "test_packaging",
    "test_packaging_extras",
    "test_peers",
    "test_planning_collision",
    "test_planning_esdf",
    "test_planning_global_path",
    "test_planning_grid_window",
    "test_planning_mapio",
    "test_planning_mpc",
    "test_planning_mpc_discs",
    "test_planning_mpc_moving",
    "test_planning_sizing",
    "test_planning_sqp",
    "test_planning_surfaces",
    "test_profile",
    "test_robot_profiles",
    "test_ros_adapter",
    "test_ros_convert",
    "test_ros_markers",
    "test_ros_params",
    "test_ros_replay",
    "test_ros_sim_adapter",
    "test_ros_tracks",
    "test_ros_transforms",
    "test_rotation_shim",
    "test_sim_data",
    "test_sim_plot",
    "test_sim_moving_family",
    "test_sim_realism",
    "test_sim_world",
    "test_theory_assoc",
    "test_theory_bigram",
    "test_tracking",
    "test_theory_cam",
    "test_theory_factual",
    "test_theory_scaling",
    "test_worlds",
}

INTEGRATION = {
    "test_cli_bench",
    "test_cli_eval",
    "test_costmap_closed_loop",
    "test_collect_lifetime",
    "test_dataset_collect",
    "test_episode_closed_loop",
    "test_experiments_icl_ext",
    "test_icl_studies",
    "test_map_fuzz",
    "test_mnemosyne_studies",
    "test_moving_obstacles",
    "test_optim_cli",
    "test_peers_closed_loop",
    "test_quiet_output",
    "test_ros_fuzz",
    "test_sim_lidar_grid",
    "test_sim_mapworld",
    "test_sim_robot",
    "test_store_fuzz",
    "test_warmstart",
}

ROS = {
    "test_ros_follow_path_live",
    "test_ros_interfaces",
    "test_ros_lifecycle_live",
    "test_ros_node_live",
    "test_ros_sim_live",
}

# module -> {kind: [test function names]}: the tests of a mixed module that are not of the module's kind.
EXCEPTIONS: dict[str, dict[str, list[str]]] = {
    # --- unit modules with integration / ros tests
    "test_cli_errors": {"integration": ["test_real_process_stderr_is_one_line"]},  # the CLI as a real process
    "test_footprint_integration": {
        "integration": [
            "test_simulator_builds_the_profiles_chassis",
            "test_simulator_clearance_is_the_footprint_polygons_distance",
            "test_collision_is_the_box_not_its_circumscribed_circle",
            "test_jackal_closed_loop_passes_the_narrow_gap",
            "test_episode_refuses_a_simulator_of_another_body",
            "test_demo_with_the_jackal_profile_drives_an_open_world",
        ]
    },
    "test_icl_core": {"integration": ["test_training_reduces_in_context_loss"]},
    "test_icl_issue12": {
        "integration": [
            "test_train_callback_sees_every_step_and_the_end",
            "test_plateau_criterion_stops_and_keeps_the_best_validation_parameters",
            "test_run_time_guard_repairs_an_untrained_richer_model",
        ]
    },
    "test_icl_learnable_lfom": {"integration": ["test_core_trainer_lowers_in_context_loss"]},
    "test_icl_moe": {"integration": ["test_prompt_gate_learns_to_route_components"]},
    "test_identify": {  # bags recorded from PyBullet
        "integration": [
            "test_identify_recovers_known_drive_from_simulated_bag",
            "test_identify_without_ground_truth_writes_only_identifiable_slip",
            "test_cli_records_identifies_and_writes_a_loadable_profile",
        ]
    },
    "test_nav_controller": {"integration": ["test_kinematic_closed_loop_reaches_goal_around_obstacle"]},
    "test_nav_maneuver": {"integration": ["test_controller_gets_the_wedged_robot_through_the_lane"]},
    "test_nav_moving_obstacles": {
        "integration": [
            "test_the_robot_is_at_rest_when_a_head_on_box_arrives",
            "test_a_tracked_crossing_box_is_met_where_it_will_be",
            "test_the_rotation_shim_stands_aside_while_a_moving_obstacle_is_predicted",
        ]
    },
    "test_nav_narrow_passage": {
        "integration": [
            "test_a_slot_narrower_than_the_full_margin_is_passed_with_the_floor_kept",
            "test_without_narrowing_the_same_slot_stops_the_robot",
            "test_a_slot_narrower_than_the_robot_is_not_entered",
        ]
    },
    "test_nav_recovery": {
        "integration": [
            "test_goal_behind_a_wall_is_reached_only_with_the_own_path",
            "test_no_plan_rooms_episode_reaches_the_goal",
            "test_no_plan_rooms_episodes_all_reach_the_goal",
            "test_boxed_in_robot_runs_the_recoveries_then_fails",
            "test_a_robot_standing_still_recovers_before_the_progress_checker",
            "test_own_path_in_a_daemonic_process_plans_on_the_step",  # a multiprocessing process
        ]
    },
    "test_nav_sparse_path": {
        "integration": [
            "test_sparse_path_reaches_the_goal_like_the_dense_one",
            "test_start_goal_pair_reaches_the_goal",
        ]
    },
    "test_optimizers": {
        "integration": [
            "test_short_meta_training_lowers_meta_loss",
            "test_meta_training_resume_equals_uninterrupted",
            "test_mnemosyne_optimizer_trains_an_unseen_model",
            "test_mnemosyne_optimizer_state_dict_round_trips",  # on the meta-trained run
            "test_attention_optimizer_meta_trains",
            "test_meta_training_run_from_before_a_new_config_field_resumes",
        ]
    },
    "test_packaging": {
        "ros": ["test_colcon_build"],
        "integration": ["test_pip_install_finds_its_data", "test_cli_help_lists_commands"],
    },
    "test_packaging_extras": {"integration": ["test_the_node_core_runs_with_the_base_install_alone"]},
    "test_planning_sqp": {  # a second interpreter builds the compile-cache entry
        "integration": [
            "test_another_process_finds_the_cache_entry",
            "test_a_corrupt_or_foreign_cache_entry_is_rebuilt_never_loaded",
        ]
    },
    "test_robot_profiles": {"integration": ["test_pybullet_loads_the_generated_chassis"]},
    "test_ros_interfaces": {  # refused or checked before any build, in-process
        "unit": [
            "test_a_bad_out_is_one_line_before_any_work",
            "test_missing_build_tools_are_named_with_the_extra_that_brings_them",
            "test_the_definitions_keep_jazzys_fields",
        ]
    },
    "test_ros_adapter": {"integration": ["test_a_goal_beyond_a_small_costmap_is_approached_without_a_global_path"]},
    "test_ros_sim_adapter": {  # the simulator node's core steps a PyBullet Simulator
        "integration": [
            "test_command_is_held_then_stopped_after_the_timeout",
            "test_collision_and_goal_events_and_exit_codes",
            "test_robot_params_give_the_simulator_the_profiles_body_lidar_and_world",
        ]
    },
    "test_sim_realism": {
        "integration": [
            "test_simulator_ideal_realism_is_the_ideal_robot_and_lagging_one_follows_the_drive",
            "test_limited_field_of_view_and_dropouts",
        ]
    },
    "test_sim_world": {
        "integration": [
            "test_rays_hit_exactly_the_grid_walls",
            "test_moving_obstacles_become_bodies_of_their_shape_where_they_start",
        ]
    },
    "test_theory_assoc": {
        "integration": [
            "test_mlp_memory_trains_to_perfect_recall_on_a_small_table",
            "test_study_pipeline_tiny",
            "test_quick_study_runs_end_to_end",
        ]
    },
    "test_theory_cam": {"integration": ["test_study_quick_smoke"]},
    "test_theory_factual": {
        "integration": [
            "test_one_layer_transformer_learns_a_small_fact_table",
            "test_bracket_threshold_trains_failures_below_and_successes_above",
            "test_factual_recall_study_smoke",
            "test_induction_head_study_smoke",
        ]
    },
    "test_theory_scaling": {
        "integration": [
            "test_online_training_reduces_error",
            "test_study_pipeline_tiny",
            "test_quick_study_runs_end_to_end",
        ]
    },
    # --- integration modules with unit tests
    "test_cli_eval": {
        "unit": [
            "test_eval_bad_input_is_one_clear_line",
            "test_eval_map_start_inside_obstacle",
            "test_data_stats_cli",
        ]
    },
    "test_episode_closed_loop": {
        "unit": ["test_a_step_that_planned_nothing_is_recorded_with_the_goal_as_its_sub_goal"]
    },
    "test_experiments_icl_ext": {
        "unit": [
            "test_dist_is_zero_exactly_for_multiples_of_sigma_inverse",
            "test_dist_matches_its_definition_as_a_minimum_over_alpha",
        ]
    },
    "test_icl_studies": {
        "unit": ["test_aggregate_and_claim_helpers", "test_seed_data_differs_per_seed_and_matches_dtype"]
    },
    "test_mnemosyne_studies": {
        "unit": [
            "test_long_horizon_classification",
            "test_quick_configs_are_the_full_protocol_scaled_down",
        ]
    },
    "test_moving_obstacles": {"unit": ["test_eval_rejects_bad_world_flags"]},
    "test_optim_cli": {"unit": ["test_user_errors_are_one_line_before_any_work"]},
    "test_ros_fuzz": {
        "unit": [
            "test_every_hostile_message_survives_the_wire",
            "test_the_stream_is_seeded",
            "test_monitor_flags_each_kind_of_violation",
            "test_monitor_holds_a_lag_compensating_node_to_the_inverse_of_its_limits",
            "test_the_streams_robot_has_the_drive_the_node_compensates",
            "test_far_goals_sweep_every_decade_and_are_labelled_by_the_accepted_band",
            "test_episodes_without_a_global_path_clear_a_hostile_one",
        ]
    },
    "test_sim_lidar_grid": {
        "unit": [
            "test_window_rolls_and_keeps_evidence_in_map_frame",
            "test_repeated_misses_clear_a_hit_and_logodds_clamp",
        ]
    },
    "test_sim_mapworld": {"unit": ["test_map_world_rejects_blocked_start_and_cut_off_goal"]},
    "test_warmstart": {
        "unit": [
            "test_model_shapes_bounds_and_rollout_consistency",
            "test_inputs_see_the_problem_in_the_robot_frame_and_mirror_exactly",
            "test_the_pipeline_total_is_the_critical_path",
        ]
    },
}

# Unit in kind but too slow for the one-minute unit tier (each over ~0.45 s here: a sweep, a Monte Carlo estimate, a
# cover's integer program, tens of MPC solves, a store round trip): integration, so that `make test-fast` stays under
# a minute on a loaded 2-core machine. Made fast, a test moves back by leaving this list.
SLOW_IN_PROCESS: dict[str, list[str]] = {
    "test_dataset_store": ["test_verify_and_repair", "test_split_is_by_world_and_disjoint"],
    "test_footprint": [
        "test_cover_covers_the_polygon_within_the_stated_bound",
        "test_narrow_gap_the_rectangle_fits_where_its_circle_does_not",
        "test_fewer_discs_mean_a_larger_error",
    ],
    "test_footprint_integration": [
        "test_path_where_the_oriented_footprint_cannot_turn_is_reported",
        "test_rectangle_global_path_passes_a_gap_its_circumscribed_circle_does_not",
        "test_default_robot_global_paths_unchanged_on_seeds_1000_to_1019",
    ],
    "test_identify": ["test_a_small_clean_bag_fits"],
    "test_memory_attention": ["test_stabilisation_does_not_change_attention"],
    "test_memory_features": ["test_kernel_estimate_is_unbiased", "test_orthogonal_rows_are_marginally_gaussian"],
    "test_nav_actuation": ["test_node_limiter_allows_the_lag_inverse"],
    "test_peers": ["test_window_of_a_lagging_drive_holds_only_velocities_it_reaches"],  # builds the Jackal's MPC
    "test_nav_controller": [
        "test_a_turn_that_would_hit_a_wall_stops_and_says_so",
        "test_rti_checks_its_iterate_over_the_horizon_as_a_converged_plan_is",
        "test_rti_runs_one_iteration_a_tick_and_continues_from_its_iterate",
    ],
    "test_nav_maneuver": [
        "test_recovery_sweeps_check_the_obstacle_cells_not_the_interpolated_field",
        "test_a_robot_blind_behind_plans_forward_only_and_reverses_in_recoveries_alone",
    ],
    "test_nav_recovery": [
        "test_fallback_reuses_a_plan_the_footprint_fits_but_the_circumscribed_circle_does_not",
        "test_a_far_goal_moved_by_localiser_corrections_is_the_same_goal",
        "test_the_re_plan_recovery_brakes_for_its_step_instead_of_solving",
    ],
    "test_planning_collision": ["test_disc_centres_turn_with_the_body"],
    "test_planning_global_path": ["test_bench_sqp_cli_writes_the_documented_json", "test_plot_plan_writes_png"],
    "test_planning_mpc": [
        "test_receding_horizon_collision_free_on_generated_worlds",
        "test_fallback_ipopt_rescues_a_capped_sqp",
    ],
    "test_planning_mpc_discs": ["test_every_disc_keeps_its_clearance_and_both_forms_agree"],
    "test_ros_adapter": [
        "test_acceleration_limits_hold_per_control_period",
        "test_frozen_odometry_ramps_the_command_to_zero_within_the_limits",
        "test_the_odometry_age_and_the_latency_are_predicted_over",
        "test_goal_reached_ramps_to_zero_then_idles",
    ],
    "test_ros_replay": ["test_replay_writes_the_commands_the_node_would_publish"],
    "test_ros_tracks": [  # 30-60 node-core ticks: ~1 s each
        "test_the_node_core_reports_the_crossing_box_on_diagnostics",
        "test_a_node_ticking_faster_than_dt_tracks_the_true_speed",
        "test_grids_a_few_ms_off_the_ticks_keep_the_velocity_estimate",
    ],
    "test_ros_transforms": ["test_memory_stays_bounded_over_a_million_adds"],  # a million adds: ~1.5 s
    "test_worlds": [
        "test_dense_is_generated_only_when_named_and_width_comes_from_config",
        "test_deterministic_per_seed_and_distinct_across_seeds",
    ],
}


def module_kind(module: str) -> str | None:
    """The kind UNIT / INTEGRATION / ROS give a module (None: listed in none, or in more than one)."""
    kinds = [k for k, mods in zip(KINDS, (UNIT, INTEGRATION, ROS), strict=True) if module in mods]
    return kinds[0] if len(kinds) == 1 else None


def kind_of_test(module: str, name: str) -> str | None:
    """The kind this file gives the test function `name` of `module` (None: its module is not classified)."""
    for kind, names in EXCEPTIONS.get(module, {}).items():
        if name in names:
            return kind
    if name in SLOW_IN_PROCESS.get(module, ()):
        return "integration"
    return module_kind(module)


KIND_PROBLEMS = pytest.StashKey[list]()  # (nodeid, kinds) of every collected test without exactly one kind


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: every collected test is classified and checked
def pytest_collection_modifyitems(config, items):
    problems = []
    for item in items:
        own = {m.name for m in item.iter_markers() if m.name in KINDS}
        if not own:
            module = item.path.stem
            name = getattr(item, "originalname", None) or item.name
            kind = kind_of_test(module, name)
            if kind is not None:
                item.add_marker(kind)
                own = {kind}
        if len(own) != 1:
            problems.append((item.nodeid, sorted(own)))
    config.stash[KIND_PROBLEMS] = problems


@pytest.fixture
def kind_problems(request) -> list:
    """(nodeid, kinds) of every test collected in this session (before `-m`) that has not exactly one kind."""
    return request.config.stash[KIND_PROBLEMS]


# --- Nav2 / TF interface packages (mnemo_mpc.ros.interfaces, issue 29) ---------------------------------------------
@pytest.fixture(scope="session")
def nav2_interfaces_prefix(request):
    """nav2_msgs (FollowPath) and tf2_msgs (TFMessage) built from the shipped definitions, once: cached under the
    pytest cache (`.pytest_cache/d/ros_interfaces/KEY`), keyed by `interfaces.build_key()` (sources, Python, ROS wheel
    versions), so a later session reuses it and a changed definition rebuilds. A file lock makes parallel workers
    (xdist) wait for one build instead of compiling the same thing twice. Returns the `interfaces.Prefix`.

    Skips only when the build tools are absent (no `nav2` extra, CMake or compiler) outside CI; under CI (`CI` set,
    as .ci/run runs) and whenever the tools are there, a failed build FAILS the tests that need it."""
    pytest.importorskip("rclpy", reason="ROS 2 Jazzy rclpy wheels: pip install 'ros-jazzy-rclpy[fastrtps]'")
    from mnemo_mpc.errors import InputError
    from mnemo_mpc.ros import interfaces

    missing = interfaces.missing_build_tools()
    if missing:
        reason = f"the interface build needs {', '.join(missing)} ({interfaces.NAV2_EXTRA})"
        if os.environ.get("CI"):
            pytest.fail(f"CI installs the nav2 extra, yet {reason}", pytrace=False)
        pytest.skip(reason)
    cache = getattr(request.config, "cache", None)
    root = (
        Path(cache.mkdir("ros_interfaces"))
        if cache is not None
        else request.getfixturevalue("tmp_path_factory").mktemp("ros_interfaces")
    )
    key = interfaces.build_key()
    prefix = root / key[:16]
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        try:
            found = interfaces.read_prefix(prefix)
        except InputError:
            found = None
        if found is None or found.info.get("key") != key:
            for old in root.iterdir():  # other keys' builds and a killed build's staging folders
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
            try:
                found = interfaces.build(prefix)
            except interfaces.BuildFailed as exc:
                pytest.fail(f"{exc}\n{exc.tail}", pytrace=False)
    return found


@pytest.fixture(scope="session")
def nav2_interfaces(nav2_interfaces_prefix) -> dict[str, str]:
    """The environment for a subprocess that imports nav2_msgs and tf2_msgs: this process's, with the built prefix
    first on PYTHONPATH, LD_LIBRARY_PATH and AMENT_PREFIX_PATH (`interfaces.environment`)."""
    from mnemo_mpc.ros import interfaces

    return interfaces.environment(nav2_interfaces_prefix.root)
