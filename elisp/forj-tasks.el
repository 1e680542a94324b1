;;; forj-tasks.el --- The Tasks panel: the model's plan, visible and editable  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; `M-x forj-tasks' shows, in a side window, the plan the model keeps
;; with the `todo_write' and `task' tools: todos and tasks grouped by
;; status, with priority, labels, subtask progress (2/5) and where in
;; the code each one is.  The plan lives in the worker, per project, so
;; it survives restarts and every chat of the project shares it.
;;
;; The panel changes as results arrive: `forj-tasks-note-results' is
;; given each batch's results and applies those of the two tools (a
;; task or todo created, changed or deleted, a list) to the panel of
;; their project.  Nothing polls.
;;
;; What the user does in the panel (complete, reopen, delete, add,
;; export) goes through the same worker tools as the model's calls, so
;; the model sees the user's changes on its next `list', and an export
;; is reviewed like any other write.
;;
;; `forj-tasks-result-summary' gives the one line a chat shows for a
;; plan change instead of the result's JSON.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'seq)
(require 'text-property-search)
(require 'forj)
(require 'forj-worker)
(require 'forj-tools)
(require 'forj-review)

(defgroup forj-tasks nil
  "The Tasks panel: the model's todos and tasks."
  :group 'forj
  :prefix "forj-tasks-")

(defcustom forj-tasks-window-width 0.33
  "Width of the Tasks panel's side window: columns, or a fraction of the frame."
  :type '(choice (natnum :tag "Columns") (float :tag "Fraction of the frame"))
  :group 'forj-tasks)

(defcustom forj-tasks-window-side 'right
  "Side of the frame the Tasks panel opens on."
  :type '(choice (const left) (const right) (const top) (const bottom))
  :group 'forj-tasks)

(defface forj-tasks-heading '((t :inherit bold))
  "Face of the panel's section headings."
  :group 'forj-tasks)

(defface forj-tasks-group '((t :inherit font-lock-keyword-face))
  "Face of the status groups."
  :group 'forj-tasks)

(defface forj-tasks-done '((t :inherit shadow :strike-through t))
  "Face of completed items."
  :group 'forj-tasks)

(defface forj-tasks-meta '((t :inherit shadow))
  "Face of ids, locations and labels."
  :group 'forj-tasks)

(defface forj-tasks-priority '((t :inherit warning))
  "Face of high and critical priorities."
  :group 'forj-tasks)

;;; The plan as Emacs knows it

(defvar-local forj-tasks--panel-root nil
  "The project root this panel shows.")

(defvar forj-tasks--plans (make-hash-table :test #'equal)
  "Per project (see `forj-tasks--key'): a plist (:todos LIST :tasks LIST).
What the last results said; only projects with a panel are kept.")

(defun forj-tasks--key (root)
  "ROOT as the key of its plan: absolute, links resolved, ending in a slash.
The worker names its root with links resolved; Emacs may not."
  (file-name-as-directory (file-truename (expand-file-name root))))

(defconst forj-tasks--stores '(("todo_write" :todos :todos-revision)
                                ("task" :tasks :tasks-revision))
  "Each plan tool, the part of the plan it keeps, and where its revision is.")

(defun forj-tasks--upsert (items item)
  "ITEMS with ITEM in place of the one with its id, or added at the end."
  (let ((id (plist-get item :id)))
    (if (cl-find id items :key (lambda (x) (plist-get x :id)) :test #'equal)
        (mapcar (lambda (x) (if (equal (plist-get x :id) id) item x)) items)
      (append items (list item)))))

(defun forj-tasks--apply (plan name result)
  "PLAN after the successful RESULT (the inner result object) of tool NAME.
Each result carries the store's revision: results may arrive out of
order (a list computed before a change, delivered after it), and one
older than what the plan already shows is left out."
  (let* ((store (cdr (assoc name forj-tasks--stores)))
         (key (car store))
         (items (plist-get plan key))
         (shown (or (plist-get plan (cadr store)) -1))
         (revision (plist-get result :revision))
         (newer (or (not (integerp revision)) (> revision shown)))
         (current (or newer (= revision shown))))
    (cond
     ((and (plist-get result :task) newer)
      (setq items (forj-tasks--upsert items (plist-get result :task))
            shown (or revision shown)))
     ((and (eq (plist-get result :deleted) t) newer)
      (setq items (cl-remove (plist-get result :id) items
                             :key (lambda (x) (plist-get x :id)) :test #'equal)
            shown (or revision shown)))
     ((and (vectorp (plist-get result :tasks)) current)
      (let ((listed (append (plist-get result :tasks) nil)))
        (if (plist-get result :filter)
            ;; A filtered list shows part of the plan: update what it shows.
            (dolist (item listed) (setq items (forj-tasks--upsert items item)))
          (setq items listed
                shown (or revision shown))))))
    (plist-put (plist-put (copy-sequence plan) key items) (cadr store) shown)))

(defun forj-tasks--after-batch (pairs root)
  "Give the Tasks panel of ROOT the results in PAIRS, a batch's (CALL . RESULT)."
  (forj-tasks-note-results root (mapcar #'cdr pairs)))

(add-hook 'forj-tools-after-batch-functions #'forj-tasks--after-batch)

(defun forj-tasks-note-results (root results)
  "Apply the plan tools' RESULTS to the Tasks panel of project ROOT.
RESULTS is a sequence of tool-result plists (any tools, in call
order), as a batch ends with them.  The panel of ROOT, if open,
shows the change at once; results of other tools are ignored."
  (when root
    (let* ((key (forj-tasks--key root))
           (plan (gethash key forj-tasks--plans 'none)))
      (unless (eq plan 'none)
        (seq-doseq (result results)
          (when (and (eq (plist-get result :ok) t)
                     (assoc (plist-get result :name) forj-tasks--stores))
            (setq plan (forj-tasks--apply plan (plist-get result :name)
                                          (plist-get result :result)))))
        (puthash key plan forj-tasks--plans)
        (dolist (buffer (forj-tasks--panels key))
          (let ((window (get-buffer-window buffer t)))
            ;; In its window, so the item under the window's point stays there.
            (if window
                (with-selected-window window (forj-tasks--render))
              (with-current-buffer buffer (forj-tasks--render)))))))))

(defun forj-tasks--panels (key)
  "The live panel buffers of the project whose plan is under KEY."
  (cl-remove-if-not (lambda (buffer)
                      (with-current-buffer buffer
                        (and (derived-mode-p 'forj-tasks-mode) forj-tasks--panel-root
                             (equal (forj-tasks--key forj-tasks--panel-root) key))))
                    (buffer-list)))

;;; One line per plan change, for the chat

(defun forj-tasks--title (item)
  "ITEM's title, quoted and cut to one short line."
  (format "“%s”" (truncate-string-to-width
                  (replace-regexp-in-string "[\n\r\t]+" " " (or (plist-get item :title) ""))
                  60 nil nil "…")))

(defun forj-tasks--progress (item)
  "ITEM's subtask progress as \"DONE/ALL\", or nil without subtasks."
  (let ((subtasks (append (plist-get item :subtasks) nil)))
    (when subtasks
      (format "%d/%d" (cl-count-if (lambda (s) (eq (plist-get s :done) t)) subtasks)
              (length subtasks)))))

(defun forj-tasks--count-by-status (items)
  "\"N status, …\" for ITEMS, in the order statuses first appear."
  (let (counts)
    (dolist (item items)
      (let* ((status (plist-get item :status))
             (cell (assoc status counts)))
        (if cell (setcdr cell (1+ (cdr cell))) (push (cons status 1) counts))))
    (mapconcat (lambda (c) (format "%d %s" (cdr c) (replace-regexp-in-string "_" " " (car c))))
               (nreverse counts) ", ")))

(defun forj-tasks-result-summary (name args result)
  "One line saying what the call NAME with ARGS changed in the plan, or nil.
RESULT is the call's tool-result plist (with :ok and :result).  Nil
for other tools and for failed calls: their result shows as usual."
  (when (and (assoc name forj-tasks--stores) (eq (plist-get result :ok) t))
    (let* ((out (plist-get result :result))
           (what (if (equal name "task") "task" "todo"))
           (item (plist-get out :task))
           (id (or (plist-get item :id) (plist-get out :id) (plist-get args :id) "?"))
           (action (plist-get args :action)))
      (concat
       "Plan: "
       (pcase action
         ("create" (format "+ %s %s %s" what id (forj-tasks--title item)))
         ("update" (format "%s %s updated %s" what id (forj-tasks--title item)))
         ("complete" (format "✓ %s %s %s completed" what id (forj-tasks--title item)))
         ("reopen" (format "↺ %s %s %s reopened" what id (forj-tasks--title item)))
         ("set_status" (format "%s %s %s → %s" what id (forj-tasks--title item)
                               (replace-regexp-in-string "_" " " (or (plist-get item :status) "?"))))
         ("add_subtask" (format "%s %s + subtask %s (%s)" what id
                                (forj-tasks--title (car (last (append (plist-get item :subtasks) nil))))
                                (forj-tasks--progress item)))
         ("update_subtask" (format "%s %s subtask %s updated (%s)" what id
                                   (plist-get (plist-get args :subtask) :id)
                                   (forj-tasks--progress item)))
         ("add_note" (format "%s %s note added" what id))
         ("delete" (format "− %s %s deleted" what id))
         ("list" (let ((items (append (plist-get out :tasks) nil)))
                   (format "%d %s%s%s" (length items) what (if (= (length items) 1) "" "s")
                           (if items (format " (%s)" (forj-tasks--count-by-status items)) ""))))
         ("export" (if (plist-get out :count)
                       (format "%d %s(s) exported to %s%s" (plist-get out :count) what
                               (plist-get out :path)
                               (if (eq (plist-get out :unchanged) t) " (unchanged)" ""))
                     (format "%s list exported (edited by the user)" what)))
         (_ (format "%s %s" what (or action "?"))))))))

;;; The panel

(defvar-local forj-tasks--filter nil
  "The panel's filter: a plist of :status, :label and :path, each optional.")

(defvar forj-tasks-filter-map
  (let ((map (make-sparse-keymap)))
    (define-key map "s" #'forj-tasks-filter-status)
    (define-key map "l" #'forj-tasks-filter-label)
    (define-key map "p" #'forj-tasks-filter-path)
    (define-key map "/" #'forj-tasks-filter-clear)
    map)
  "Keys after / in the Tasks panel: filter the items shown.")

(defvar forj-tasks-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'forj-tasks-visit)
    (define-key map "c" #'forj-tasks-complete)
    (define-key map "o" #'forj-tasks-reopen)
    (define-key map "d" #'forj-tasks-delete)
    (define-key map "s" #'forj-tasks-set-status)
    (define-key map "a" #'forj-tasks-add-todo)
    (define-key map "A" #'forj-tasks-add-task)
    (define-key map "e" #'forj-tasks-export)
    (define-key map "g" #'forj-tasks-refresh)
    (define-key map "n" #'forj-tasks-next)
    (define-key map "p" #'forj-tasks-previous)
    (define-key map "/" forj-tasks-filter-map)
    map)
  "Keymap of `forj-tasks-mode'.")

(define-derived-mode forj-tasks-mode special-mode "forj-tasks"
  "The plan of a project: the model's todos and tasks.

On an item, \\<forj-tasks-mode-map>\\[forj-tasks-visit] visits its file and line,
\\[forj-tasks-complete] completes it, \\[forj-tasks-reopen] reopens it and \\[forj-tasks-delete] deletes it;
\\[forj-tasks-set-status] sets a task's status.  \\[forj-tasks-add-todo] and \\[forj-tasks-add-task] add a todo
or a task, \\[forj-tasks-export] exports either to Markdown (reviewed as a diff),
/ filters by status, label or path, and \\[forj-tasks-refresh] asks the worker again.

\\{forj-tasks-mode-map}"
  (setq-local truncate-lines t)
  (setq-local revert-buffer-function (lambda (&rest _) (forj-tasks-refresh))))

(defun forj-tasks--buffer-name (root)
  "The name of the panel buffer of ROOT."
  (format "*forj-tasks: %s*" (file-name-nondirectory (directory-file-name root))))

(defun forj-tasks--matches (item kind)
  "Whether ITEM (of KIND, :todos or :tasks) passes the panel's filter."
  (let ((status (plist-get forj-tasks--filter :status))
        (label (plist-get forj-tasks--filter :label))
        (path (plist-get forj-tasks--filter :path)))
    (and (or (null status) (equal (plist-get item :status) status))
         (or (null label) (seq-contains-p (plist-get item :labels) label))
         (or (null path)
             (seq-some (lambda (place) (forj-tasks--under (plist-get place :path) path))
                       (forj-tasks--places item kind))))))

(defun forj-tasks--under (file dir)
  "Whether FILE (a project path) is DIR or inside it."
  (let ((dir (string-remove-suffix "/" (string-remove-prefix "./" dir))))
    (or (member dir '("" "."))
        (equal file dir)
        (string-prefix-p (concat dir "/") file))))

(defun forj-tasks--places (item kind)
  "The places ITEM (of KIND) points at: a todo's location, a task's links."
  (if (eq kind :todos)
      (and (plist-get item :location) (list (plist-get item :location)))
    (append (plist-get item :links) nil)))

(defun forj-tasks--place-text (place)
  "PLACE as path:line."
  (concat (plist-get place :path)
          (and (plist-get place :line) (format ":%s" (plist-get place :line)))))

(defconst forj-tasks--groups
  '((:todos ("open" . "Open") ("completed" . "Completed"))
    (:tasks ("in_progress" . "In progress") ("open" . "Open") ("blocked" . "Blocked")
            ("completed" . "Completed")))
  "The status groups of each part of the plan, in the order shown.")

(defconst forj-tasks--marks
  '(("open" . "○") ("in_progress" . "◐") ("blocked" . "⊘") ("completed" . "✓"))
  "The mark in front of an item of each status.")

(defun forj-tasks--item-line (item kind)
  "The panel line of ITEM (of KIND).
What the model wrote has its invisible and format characters shown as
markers, as in the review: a title cannot hide text or reorder it."
  (let* ((done (equal (plist-get item :status) "completed"))
         (priority (plist-get item :priority))
         (progress (forj-tasks--progress item))
         (labels (append (plist-get item :labels) nil))
         (places (forj-tasks--places item kind)))
    (concat
     "  " (cdr (assoc (plist-get item :status) forj-tasks--marks)) " "
     (propertize (forj-review-mark-invisible
                  (replace-regexp-in-string "[\n\r\t]+" " " (or (plist-get item :title) "")))
                 'face (and done 'forj-tasks-done))
     (and priority (propertize (format " !%s" priority)
                               'face (if (member priority '("high" "critical"))
                                         'forj-tasks-priority
                                       'forj-tasks-meta)))
     (and progress (format " %s" progress))
     (propertize (forj-review-mark-invisible
                  (concat (format " %s" (plist-get item :id))
                          (and places (format " %s" (forj-tasks--place-text (car places))))
                          (and (cdr places) (format " +%d" (length (cdr places))))
                          (mapconcat (lambda (l) (format " #%s" l)) labels "")))
                 'face 'forj-tasks-meta))))

(defun forj-tasks--render ()
  "Redraw the panel in the current buffer from the plan, keeping point on its item."
  (let* ((plan (gethash (forj-tasks--key forj-tasks--panel-root) forj-tasks--plans))
         (here (get-text-property (point) 'forj-tasks-item))
         (line (line-number-at-pos))
         (inhibit-read-only t))
    (erase-buffer)
    (dolist (part forj-tasks--groups)
      (let* ((kind (car part))
             (all (plist-get plan kind))
             (shown (cl-remove-if-not (lambda (i) (forj-tasks--matches i kind)) all)))
        (insert (propertize (format "%s (%d%s)\n" (if (eq kind :todos) "Todos" "Tasks")
                                    (length all)
                                    (if (= (length shown) (length all)) ""
                                      (format ", %d shown" (length shown))))
                            'face 'forj-tasks-heading))
        (dolist (group (cdr part))
          (let ((items (cl-remove-if-not (lambda (i) (equal (plist-get i :status) (car group)))
                                         shown)))
            (when items
              (insert (propertize (format " %s\n" (cdr group)) 'face 'forj-tasks-group))
              (dolist (item items)
                (insert (propertize (forj-tasks--item-line item kind)
                                    'forj-tasks-item (cons kind item))
                        "\n")))))
        (insert "\n")))
    (goto-char (point-min))
    (if here
        (let ((found (text-property-search-forward
                      'forj-tasks-item here
                      (lambda (want got) (and got (eq (car want) (car got))
                                              (equal (plist-get (cdr want) :id)
                                                     (plist-get (cdr got) :id)))))))
          (if found
              (goto-char (prop-match-beginning found))
            (forward-line (1- line))))
      (forward-line (1- line)))))

(defun forj-tasks--header-line ()
  "The panel's header line: the project and the filter."
  (concat " " (file-name-nondirectory (directory-file-name forj-tasks--panel-root))
          (if forj-tasks--filter
              (concat " · filter: "
                      (mapconcat (lambda (k) (format "%s=%s" (substring (symbol-name k) 1)
                                                     (plist-get forj-tasks--filter k)))
                                 (cl-remove-if-not (lambda (k) (plist-get forj-tasks--filter k))
                                                   '(:status :label :path))
                                 " "))
            "")
          (substitute-command-keys
           "  ·  \\<forj-tasks-mode-map>\\[forj-tasks-visit] visit  \\[forj-tasks-complete] \
complete  \\[forj-tasks-add-todo] add  / filter")))

;;;###autoload
(defun forj-tasks (&optional root)
  "Show the Tasks panel of project ROOT (default: the current project).
It lists the todos and tasks the model (or the user) keeps with the
`todo_write' and `task' tools and changes as their results arrive.
Return the panel buffer."
  (interactive)
  (let* ((root (file-name-as-directory (expand-file-name (or root (forj-worker-project-root)))))
         (key (forj-tasks--key root))
         (buffer (or (car (forj-tasks--panels key))
                     (get-buffer-create (forj-tasks--buffer-name root)))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'forj-tasks-mode) (forj-tasks-mode))
      (setq forj-tasks--panel-root root)
      (setq default-directory root)
      (setq header-line-format '(:eval (forj-tasks--header-line)))
      (unless (gethash key forj-tasks--plans)
        (puthash key (list :todos nil :tasks nil) forj-tasks--plans))
      (forj-tasks--render))
    (display-buffer-in-side-window buffer `((side . ,forj-tasks-window-side)
                                            (slot . 0)
                                            (window-width . ,forj-tasks-window-width)))
    (forj-tasks-refresh buffer)
    buffer))

(defun forj-tasks--panel ()
  "The panel buffer this command works on, or signal."
  (unless (and (derived-mode-p 'forj-tasks-mode) forj-tasks--panel-root)
    (user-error "Not in a Tasks panel; M-x forj-tasks opens one"))
  (current-buffer))

;;; Calls through the worker

(defvar forj-tasks--counter 0
  "The number of calls the panel has made: part of each call's id.")

(defun forj-tasks--call (root specs &optional then)
  "Run SPECS, plists of :name and :args, through the worker of ROOT.
They run as one batch of the tool loop, reviewed where the tools say
so, their results applied to the panel; THEN, if given, gets the
results.  A failed call is reported in the echo area."
  (let ((buffer (generate-new-buffer " *forj-tasks-calls*")))
    (with-current-buffer buffer
      (dolist (call specs)
        (insert "```tool-call\n"
                (forj-tools-json-encode
                 (list :id (format "tasks-panel-%d" (cl-incf forj-tasks--counter))
                       :name (plist-get call :name)
                       :args (plist-get call :args)))
                "\n```\n"))
      (forj-tools-run-region
       (point-min) (point-max)
       (lambda (results)
         (kill-buffer buffer)
         (forj-tasks-note-results root results)
         (dolist (result results)
           (unless (eq (plist-get result :ok) t)
             (message "forj-tasks: %s" (plist-get (plist-get result :error) :message))))
         (when then (funcall then results)))
       root))))

(defun forj-tasks-refresh (&optional buffer)
  "Ask the worker for the whole plan again and redraw the panel BUFFER."
  (interactive)
  (with-current-buffer (or buffer (forj-tasks--panel))
    (forj-tasks--call forj-tasks--panel-root
                      (list (list :name "todo_write" :args (list :action "list"))
                            (list :name "task" :args (list :action "list"))))))

(defun forj-tasks--at-point ()
  "The (KIND . ITEM) at point, or signal."
  (or (get-text-property (line-beginning-position) 'forj-tasks-item)
      (user-error "No todo or task on this line")))

(defun forj-tasks--tool (kind)
  "Return the name of the tool for items of KIND."
  (if (eq kind :todos) "todo_write" "task"))

(defun forj-tasks--act (action &rest args)
  "Call ACTION with ARGS on the item at point."
  (let ((entry (forj-tasks--at-point)))
    (forj-tasks--call forj-tasks--panel-root
                      (list (list :name (forj-tasks--tool (car entry))
                                  :args (append (list :action action
                                                      :id (plist-get (cdr entry) :id))
                                                args))))))

(defun forj-tasks-complete ()
  "Complete the todo or task at point."
  (interactive)
  (forj-tasks--panel)
  (forj-tasks--act "complete"))

(defun forj-tasks-reopen ()
  "Reopen the completed todo or task at point."
  (interactive)
  (forj-tasks--panel)
  (forj-tasks--act "reopen"))

(defun forj-tasks-delete ()
  "Delete the todo or task at point, after asking."
  (interactive)
  (forj-tasks--panel)
  (let ((item (cdr (forj-tasks--at-point))))
    (when (yes-or-no-p (format "Delete %s %s? " (plist-get item :id) (forj-tasks--title item)))
      (forj-tasks--act "delete"))))

(defun forj-tasks-set-status (status)
  "Set the status of the task at point to STATUS."
  (interactive
   (progn
     (forj-tasks--panel)
     (unless (eq (car (forj-tasks--at-point)) :tasks)
       (user-error "Only tasks have a status to set; complete or reopen a todo"))
     (list (completing-read "Status: " '("open" "in_progress" "blocked" "completed") nil t))))
  (forj-tasks--act "set_status" :status status))

(defun forj-tasks--read-title (prompt)
  "Read a non-blank title with PROMPT."
  (let ((title (string-trim (read-string prompt))))
    (when (string-empty-p title) (user-error "A title is needed"))
    title))

(defun forj-tasks-add-todo (title)
  "Add a todo with TITLE to the plan."
  (interactive (progn (forj-tasks--panel) (list (forj-tasks--read-title "New todo: "))))
  (forj-tasks--call forj-tasks--panel-root
                    (list (list :name "todo_write" :args (list :action "create" :title title)))))

(defun forj-tasks-add-task (title priority)
  "Add a task with TITLE and PRIORITY (nil for none) to the plan."
  (interactive
   (progn (forj-tasks--panel)
          (list (forj-tasks--read-title "New task: ")
                (let ((p (completing-read "Priority (empty for none): "
                                          '("low" "medium" "high" "critical") nil t)))
                  (and (not (string-empty-p p)) p)))))
  (forj-tasks--call forj-tasks--panel-root
                    (list (list :name "task"
                                :args (append (list :action "create" :title title)
                                              (and priority (list :priority priority)))))))

(defun forj-tasks-export (kind path)
  "Export the todos or the tasks (KIND, :todos or :tasks) to PATH, after review.
An empty PATH means the tool's default (docs/TODO.md, docs/roadmap.md)."
  (interactive
   (progn (forj-tasks--panel)
          (let ((kind (if (equal (completing-read "Export: " '("todos" "tasks") nil t) "todos")
                          :todos :tasks)))
            (list kind (read-string "To (empty for the default): ")))))
  (forj-tasks--call forj-tasks--panel-root
                    (list (list :name (forj-tasks--tool kind)
                                :args (append (list :action "export")
                                              (and (not (string-empty-p path))
                                                   (list :export_path path)))))))

;;; Navigation

(defun forj-tasks-visit ()
  "Visit the file and line of the item at point (a task: one of its links)."
  (interactive)
  (forj-tasks--panel)
  (let* ((entry (forj-tasks--at-point))
         (places (forj-tasks--places (cdr entry) (car entry)))
         (place (cond ((null places) (user-error "This item has no location"))
                      ((null (cdr places)) (car places))
                      (t (let ((choices (mapcar (lambda (p) (cons (forj-tasks--place-text p) p))
                                                places)))
                           (cdr (assoc (completing-read "Visit: " choices nil t) choices))))))
         (file (forj-tasks--existing-file forj-tasks--panel-root (plist-get place :path))))
    (select-window (display-buffer (find-file-noselect file)
                                   '(display-buffer-use-some-window (inhibit-same-window . t))))
    (when (plist-get place :line)
      (goto-char (point-min))
      (forward-line (1- (plist-get place :line))))))

(defun forj-tasks--existing-file (root path)
  "PATH under ROOT as an existing file inside ROOT, or signal.
Links were checked when the model gave them; the file may have gone
or become a link out of the project since."
  (let ((file (forj-project-file path root)))
    (unless (and file (file-regular-p file))
      (user-error "%s no longer exists" path))
    (unless (file-in-directory-p (file-truename file) (file-truename root))
      (user-error "%s is outside the project" path))
    file))

(defun forj-tasks-next ()
  "Move to the next item."
  (interactive)
  (let ((match (save-excursion (end-of-line) (text-property-search-forward 'forj-tasks-item))))
    (if match (goto-char (prop-match-beginning match)) (message "No more items"))))

(defun forj-tasks-previous ()
  "Move to the previous item."
  (interactive)
  (let ((match (save-excursion (beginning-of-line) (text-property-search-backward 'forj-tasks-item))))
    (if match (goto-char (prop-match-beginning match)) (message "No earlier items"))))

;;; Filters

(defun forj-tasks--set-filter (key value)
  "Set the panel's filter KEY to VALUE and redraw; nil or \"\" clears KEY."
  (forj-tasks--panel)
  (setq forj-tasks--filter (plist-put (copy-sequence forj-tasks--filter) key
                                      (and value (not (string-empty-p value)) value)))
  (unless (cl-loop for (_ v) on forj-tasks--filter by #'cddr thereis v)
    (setq forj-tasks--filter nil))
  (forj-tasks--render)
  (force-mode-line-update))

(defun forj-tasks--known (fn)
  "The distinct non-nil values FN gives for the items of this panel's plan."
  (let ((plan (gethash (forj-tasks--key forj-tasks--panel-root) forj-tasks--plans)) values)
    (dolist (kind '(:todos :tasks))
      (dolist (item (plist-get plan kind))
        (dolist (v (funcall fn item kind)) (when v (cl-pushnew v values :test #'equal)))))
    (sort values #'string<)))

(defun forj-tasks-filter-status (status)
  "Show only items with STATUS (empty: every status)."
  (interactive (list (completing-read "Status (empty for all): "
                                      '("open" "in_progress" "blocked" "completed"))))
  (forj-tasks--set-filter :status status))

(defun forj-tasks-filter-label (label)
  "Show only items with LABEL (empty: any label)."
  (interactive (list (completing-read "Label (empty for all): "
                                      (forj-tasks--known (lambda (i _) (append (plist-get i :labels) nil))))))
  (forj-tasks--set-filter :label label))

(defun forj-tasks-filter-path (path)
  "Show only items located in PATH, a file or directory (empty: anywhere)."
  (interactive (list (completing-read "File or directory (empty for all): "
                                      (forj-tasks--known
                                       (lambda (i kind) (mapcar (lambda (p) (plist-get p :path))
                                                                (forj-tasks--places i kind)))))))
  (forj-tasks--set-filter :path path))

(defun forj-tasks-filter-clear ()
  "Show every item again."
  (interactive)
  (forj-tasks--panel)
  (setq forj-tasks--filter nil)
  (forj-tasks--render)
  (force-mode-line-update))

(provide 'forj-tasks)
;;; forj-tasks.el ends here
