//! What moto lacks and the fault proxy serves in its place: EC2 cluster placement groups
//! (`CreatePlacementGroup`, `DescribePlacementGroups`, `DeletePlacementGroup`), and a record of
//! what each `RunInstances` asked for (its placement group, zone, counts and network
//! interfaces: moto ignores `Placement.GroupName` and EFA interface types).
//!
//! As on EC2: a name made twice is `InvalidPlacementGroup.Duplicate`; deleting or launching
//! into a name not made is `InvalidPlacementGroup.Unknown`; deleting a group that a live
//! instance is in is `InvalidPlacementGroup.InUse` (the proxy asks moto for the instances
//! tagged `spillway.io/placement-group` with the group's name, as Spillway tags them).

use std::collections::BTreeMap;

/// One placement group as the proxy keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub name: String,
    pub id: String,
    pub strategy: String,
    pub tags: BTreeMap<String, String>,
    /// `available`, or `deleted` once deleted (kept, as EC2 shows deleted groups for a while).
    pub state: String,
}

/// One `RunInstances` request, its form fields decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRequest {
    pub form: BTreeMap<String, String>,
    /// The proxy answered it with an injected error.
    pub failed: bool,
}

impl RunRequest {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.form.get(key).map(String::as_str)
    }

    /// `Placement.GroupName`.
    pub fn group(&self) -> Option<&str> {
        self.get("Placement.GroupName")
    }

    /// `MinCount`, `MaxCount`.
    pub fn counts(&self) -> (u32, u32) {
        let n = |k| self.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        (n("MinCount"), n("MaxCount"))
    }

    /// The value of tag `key` in the instance's tag specification.
    pub fn tag(&self, key: &str) -> Option<&str> {
        let k = self
            .form
            .iter()
            .find(|(k, v)| k.starts_with("TagSpecification.") && k.ends_with(".Key") && *v == key)?
            .0;
        self.get(&format!("{}.Value", k.trim_end_matches(".Key")))
    }
}

/// The proxy's placement groups and its record of launches.
#[derive(Debug, Default)]
pub struct Placement {
    pub groups: BTreeMap<String, Group>,
    pub runs: Vec<RunRequest>,
    made: u64,
}

/// A form body's fields, decoded.
pub fn decode(form: &str) -> BTreeMap<String, String> {
    form_urlencoded::parse(form.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// What the proxy answers a placement-group call with.
#[derive(Debug, PartialEq)]
pub enum Answer {
    Ok(String),
    Error {
        status: u16,
        code: String,
        message: String,
    },
}

fn error(code: &str, message: String) -> Answer {
    Answer::Error {
        status: 400,
        code: code.to_string(),
        message,
    }
}

const NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn group_xml(g: &Group) -> String {
    let tags: String = g
        .tags
        .iter()
        .map(|(k, v)| {
            format!(
                "<item><key>{}</key><value>{}</value></item>",
                escape(k),
                escape(v)
            )
        })
        .collect();
    format!(
        "<groupName>{}</groupName><groupId>{}</groupId><state>{}</state><strategy>{}</strategy><tagSet>{tags}</tagSet>",
        escape(&g.name),
        g.id,
        g.state,
        escape(&g.strategy)
    )
}

/// `Filter.N.Name` / `Filter.N.Value.M` of a form: (name, values).
fn filters(form: &BTreeMap<String, String>) -> Vec<(String, Vec<String>)> {
    let mut out: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for (k, v) in form {
        let Some(rest) = k.strip_prefix("Filter.") else {
            continue;
        };
        let (n, field) = rest.split_once('.').unwrap_or((rest, ""));
        let entry = out.entry(n.to_string()).or_default();
        if field == "Name" {
            entry.0 = v.clone();
        } else if field.starts_with("Value.") {
            entry.1.push(v.clone());
        }
    }
    out.into_values().collect()
}

impl Placement {
    /// The groups made and not deleted.
    pub fn live(&self) -> Vec<&Group> {
        self.groups
            .values()
            .filter(|g| g.state == "available")
            .collect()
    }

    /// Answers a placement-group action; `in_use` says whether a live instance is in a group
    /// (asked only on delete).
    pub fn answer(
        &mut self,
        action: &str,
        form: &BTreeMap<String, String>,
        in_use: impl FnOnce(&str) -> bool,
    ) -> Answer {
        let name = form.get("GroupName").cloned().unwrap_or_default();
        match action {
            "CreatePlacementGroup" => {
                if name.is_empty() {
                    return error("MissingParameter", "GroupName is required".into());
                }
                if self
                    .groups
                    .get(&name)
                    .is_some_and(|g| g.state == "available")
                {
                    return error(
                        "InvalidPlacementGroup.Duplicate",
                        format!("The Placement Group '{name}' already exists."),
                    );
                }
                let mut tags = BTreeMap::new();
                for (k, key) in form {
                    if k.starts_with("TagSpecification.") && k.ends_with(".Key") {
                        let value = form
                            .get(&format!("{}.Value", k.trim_end_matches(".Key")))
                            .cloned()
                            .unwrap_or_default();
                        tags.insert(key.clone(), value);
                    }
                }
                self.made += 1;
                let g = Group {
                    name: name.clone(),
                    id: format!("pg-{:017x}", self.made),
                    strategy: form.get("Strategy").cloned().unwrap_or_default(),
                    tags,
                    state: "available".into(),
                };
                let xml = format!(
                    "<CreatePlacementGroupResponse xmlns=\"{NS}\"><requestId>proxy</requestId><return>true</return><placementGroup>{}</placementGroup></CreatePlacementGroupResponse>",
                    group_xml(&g)
                );
                self.groups.insert(name, g);
                Answer::Ok(xml)
            }
            "DeletePlacementGroup" => match self.groups.get(&name) {
                Some(g) if g.state == "available" => {
                    if in_use(&name) {
                        return error(
                            "InvalidPlacementGroup.InUse",
                            format!("The placement group '{name}' is in use."),
                        );
                    }
                    if let Some(g) = self.groups.get_mut(&name) {
                        g.state = "deleted".into();
                    }
                    Answer::Ok(format!(
                        "<DeletePlacementGroupResponse xmlns=\"{NS}\"><requestId>proxy</requestId><return>true</return></DeletePlacementGroupResponse>"
                    ))
                }
                _ => error(
                    "InvalidPlacementGroup.Unknown",
                    format!("The Placement Group '{name}' is unknown."),
                ),
            },
            _ => {
                let names: Vec<&String> = form
                    .iter()
                    .filter(|(k, _)| k.starts_with("GroupName."))
                    .map(|(_, v)| v)
                    .collect();
                let filters = filters(form);
                let items: String = self
                    .groups
                    .values()
                    .filter(|g| names.is_empty() || names.contains(&&g.name))
                    .filter(|g| {
                        filters.iter().all(|(f, values)| {
                            let have = match f.strip_prefix("tag:") {
                                Some(key) => g.tags.get(key).cloned(),
                                None => match f.as_str() {
                                    "group-name" => Some(g.name.clone()),
                                    "state" => Some(g.state.clone()),
                                    "strategy" => Some(g.strategy.clone()),
                                    _ => None,
                                },
                            };
                            have.is_some_and(|h| values.contains(&h))
                        })
                    })
                    .map(|g| format!("<item>{}</item>", group_xml(g)))
                    .collect();
                Answer::Ok(format!(
                    "<DescribePlacementGroupsResponse xmlns=\"{NS}\"><requestId>proxy</requestId><placementGroupSet>{items}</placementGroupSet></DescribePlacementGroupsResponse>"
                ))
            }
        }
    }

    /// Records a `RunInstances` request; an error when it names a placement group that is not
    /// there.
    pub fn run(&mut self, form: BTreeMap<String, String>, failed: bool) -> Option<Answer> {
        let group = form.get("Placement.GroupName").cloned();
        self.runs.push(RunRequest { form, failed });
        match group {
            Some(name)
                if !failed
                    && self
                        .groups
                        .get(&name)
                        .is_none_or(|g| g.state != "available") =>
            {
                Some(error(
                    "InvalidPlacementGroup.Unknown",
                    format!("The Placement Group '{name}' is unknown."),
                ))
            }
            _ => None,
        }
    }
}

/// The form of a `DescribeInstances` call that asks moto for the live instances tagged as
/// being in placement group `name`.
pub fn instances_in_group_form(name: &str) -> String {
    let mut f = form_urlencoded::Serializer::new(String::new());
    f.append_pair("Action", "DescribeInstances")
        .append_pair("Version", "2016-11-15")
        .append_pair("Filter.1.Name", "tag:spillway.io/placement-group")
        .append_pair("Filter.1.Value.1", name)
        .append_pair("Filter.2.Name", "instance-state-name");
    for (i, s) in ["pending", "running", "shutting-down", "stopping", "stopped"]
        .iter()
        .enumerate()
    {
        f.append_pair(&format!("Filter.2.Value.{}", i + 1), s);
    }
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn groups_are_made_listed_by_tag_and_deleted_once_empty() {
        let mut p = Placement::default();
        let make = form(&[
            ("GroupName", "pg-a"),
            ("Strategy", "cluster"),
            ("TagSpecification.1.ResourceType", "placement-group"),
            ("TagSpecification.1.Tag.1.Key", "spillway.io/cluster"),
            ("TagSpecification.1.Tag.1.Value", "prod"),
        ]);
        assert!(matches!(
            p.answer("CreatePlacementGroup", &make, |_| false),
            Answer::Ok(_)
        ));
        assert!(matches!(
            p.answer("CreatePlacementGroup", &make, |_| false),
            Answer::Error { code, .. } if code == "InvalidPlacementGroup.Duplicate"
        ));
        let by_tag = form(&[
            ("Filter.1.Name", "tag:spillway.io/cluster"),
            ("Filter.1.Value.1", "prod"),
        ]);
        let Answer::Ok(xml) = p.answer("DescribePlacementGroups", &by_tag, |_| false) else {
            panic!("describe")
        };
        assert!(xml.contains("<groupName>pg-a</groupName>"), "{xml}");
        let other = form(&[
            ("Filter.1.Name", "tag:spillway.io/cluster"),
            ("Filter.1.Value.1", "staging"),
        ]);
        let Answer::Ok(xml) = p.answer("DescribePlacementGroups", &other, |_| false) else {
            panic!("describe")
        };
        assert!(!xml.contains("pg-a"), "{xml}");
        let delete = form(&[("GroupName", "pg-a")]);
        assert!(matches!(
            p.answer("DeletePlacementGroup", &delete, |_| true),
            Answer::Error { code, .. } if code == "InvalidPlacementGroup.InUse"
        ));
        assert!(matches!(
            p.answer("DeletePlacementGroup", &delete, |_| false),
            Answer::Ok(_)
        ));
        assert!(p.live().is_empty());
        assert!(matches!(
            p.answer("DeletePlacementGroup", &delete, |_| false),
            Answer::Error { code, .. } if code == "InvalidPlacementGroup.Unknown"
        ));
        // Launching into it now fails as on EC2.
        let run = form(&[("Placement.GroupName", "pg-a"), ("MinCount", "2")]);
        assert!(p.run(run, false).is_some());
        assert_eq!(p.runs[0].counts(), (2, 0));
        assert_eq!(p.runs[0].group(), Some("pg-a"));
    }

    #[test]
    fn a_run_request_reads_its_tags() {
        let r = RunRequest {
            form: decode(
                "TagSpecification.1.Tag.1.Key=spillway.io%2Fneed&TagSpecification.1.Tag.1.Value=ns%2Fj%230",
            ),
            failed: false,
        };
        assert_eq!(r.tag("spillway.io/need"), Some("ns/j#0"));
        assert_eq!(r.tag("spillway.io/job"), None);
    }
}
