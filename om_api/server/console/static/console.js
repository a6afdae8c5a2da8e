// Rewrites every <time datetime> to the viewer's own time zone; without JavaScript the page
// shows the UTC text the server wrote.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });
  document.querySelectorAll("time[datetime]").forEach(function (node) {
    var moment = new Date(node.getAttribute("datetime"));
    if (!isNaN(moment.getTime())) {
      node.title = node.textContent;
      node.textContent = format.format(moment);
    }
  });
});
